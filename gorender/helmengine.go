package main

// helm's template engine, adapted from helm.sh/helm/v3 v3.22.0 pkg/engine/engine.go and files.go
// (Copyright The Helm Authors, Apache License 2.0) so that a chart renders under the same bounds as a
// gotemplate. helm's own Engine builds its function map and its output buffers inside Render, with no way to
// replace either: its strings.Builder grows without limit and its sprig, toYaml, include and tpl are
// unbounded. The behaviour kept is helm's: templates parsed in helm's order and run with the same values
// (.Values scoped per subchart, .Chart, .Files, .Release, .Capabilities, .Template, .Subcharts),
// missingkey=zero with "<no value>" removed, include and tpl with helm's recursion bound, required and fail
// wrapped as helm wraps them, helm's error text. What differs: every size-growing function is bounded
// (bounds.go), every template, include and tpl writes into a bounded writer that shares one budget per
// render, lookup answers an empty map (no cluster), getHostByName answers "" (no DNS), and nothing is
// logged (helm's lint-mode logging is not needed: charts are never linted here).

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"text/template"

	"github.com/BurntSushi/toml"
	"github.com/Masterminds/sprig/v3"
	"github.com/gobwas/glob"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	"sigs.k8s.io/yaml"
	goyaml "sigs.k8s.io/yaml/goyaml.v3"
)

const (
	helmWarnStart   = "HELM_ERR_START"
	helmWarnEnd     = "HELM_ERR_END"
	helmMaxIncludes = 1000
)

var helmWarnRegex = regexp.MustCompile(helmWarnStart + `((?s).*)` + helmWarnEnd)

func helmWarnWrap(warn string) string { return helmWarnStart + warn + helmWarnEnd }

// helmRenderable is one chart template with the values it runs with.
type helmRenderable struct {
	tpl      string
	vals     chartutil.Values
	basePath string
}

// helmFuncMap is helm's function map (sprig less env/expandenv, helm's encoders, placeholders for the
// late-bound include, tpl and required) with the sandbox's lookup and getHostByName.
func helmFuncMap() template.FuncMap {
	funcs := sprig.TxtFuncMap()
	delete(funcs, "env")
	delete(funcs, "expandenv")
	extra := template.FuncMap{
		"toToml":        toTOML,
		"fromToml":      fromTOML,
		"toYaml":        toYAML,
		"toYamlPretty":  toYAMLPretty,
		"fromYaml":      fromYAML,
		"fromYamlArray": fromYAMLArray,
		"toJson":        toJSON,
		"fromJson":      fromJSON,
		"fromJsonArray": fromJSONArray,
		"include":       func(string, any) string { return "not implemented" },
		"tpl":           func(string, any) any { return "not implemented" },
		"required":      func(string, any) (any, error) { return "not implemented", nil },
		"lookup":        func(string, string, string, string) (map[string]any, error) { return map[string]any{}, nil },
		"getHostByName": func(string) string { return "" },
	}
	for name, fn := range extra {
		funcs[name] = fn
	}
	return funcs
}

// helmEngine renders one chart's templates within one budget.
type helmEngine struct {
	budget *outputBudget
}

func (e helmEngine) includeFun(t *template.Template, includedNames map[string]int) func(string, any) (string, error) {
	return func(name string, data any) (string, error) {
		if v, ok := includedNames[name]; ok {
			if v > helmMaxIncludes {
				return "", fmt.Errorf("rendering template has a nested reference name: %s: unable to execute template", name)
			}
			includedNames[name]++
		} else {
			includedNames[name] = 1
		}
		buf := e.budget.writer()
		err := t.ExecuteTemplate(buf, name, data)
		includedNames[name]--
		return buf.release(), err
	}
}

func (e helmEngine) tplFun(parent *template.Template, includedNames map[string]int) func(string, any) (string, error) {
	return func(tpl string, vals any) (string, error) {
		t, err := parent.Clone()
		if err != nil {
			return "", fmt.Errorf("cannot clone template: %w", err)
		}
		// Re-inject the missingkey option, see text/template issue https://github.com/golang/go/issues/43022.
		t.Option("missingkey=zero")
		// Re-inject 'include' so that it can close over our clone of t; this lets any 'define's inside tpl
		// be 'include'd.
		t.Funcs(template.FuncMap{
			"include": e.includeFun(t, includedNames),
			"tpl":     e.tplFun(t, includedNames),
		})
		t, err = t.New(parent.Name()).Parse(tpl)
		if err != nil {
			return "", fmt.Errorf("cannot parse template %q: %w", tpl, err)
		}
		buf := e.budget.writer()
		if err := t.Execute(buf, vals); err != nil {
			buf.release()
			return "", fmt.Errorf("error during tpl function execution for %q: %w", tpl, err)
		}
		return strings.ReplaceAll(buf.release(), "<no value>", ""), nil
	}
}

func (e helmEngine) initFunMap(t *template.Template) {
	funcs := helmFuncMap()
	includedNames := make(map[string]int)
	funcs["include"] = e.includeFun(t, includedNames)
	funcs["tpl"] = e.tplFun(t, includedNames)
	funcs["required"] = func(warn string, val any) (any, error) {
		if val == nil {
			return val, errors.New(helmWarnWrap(warn))
		} else if s, ok := val.(string); ok && s == "" {
			return val, errors.New(helmWarnWrap(warn))
		}
		return val, nil
	}
	funcs["fail"] = func(msg string) (string, error) { return "", errors.New(helmWarnWrap(msg)) }
	boundFuncs(funcs, e.budget.maxBytes)
	t.Funcs(funcs)
}

// render parses every template, then executes each that is not a partial, in helm's order.
func (e helmEngine) render(tpls map[string]helmRenderable) (rendered map[string]string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("rendering template failed: %v", r)
		}
	}()
	t := template.New("gotpl")
	t.Option("missingkey=zero")
	e.initFunMap(t)
	keys := helmSortTemplates(tpls)
	for _, filename := range keys {
		if _, err := t.New(filename).Parse(tpls[filename].tpl); err != nil {
			return map[string]string{}, helmParseError(filename, err)
		}
	}
	rendered = make(map[string]string, len(keys))
	for _, filename := range keys {
		if strings.HasPrefix(path.Base(filename), "_") {
			continue
		}
		vals := tpls[filename].vals
		vals["Template"] = chartutil.Values{"Name": filename, "BasePath": tpls[filename].basePath}
		buf := e.budget.writer()
		if err := t.ExecuteTemplate(buf, filename, vals); err != nil {
			if limit, ok := err.(*RenderError); ok && limit.Template == "" {
				limit.Template = filename // the writer's refusal comes without a location
			}
			return map[string]string{}, helmExecError(filename, err)
		}
		// The file's text stays counted against the budget: it is part of the chart's output.
		rendered[filename] = strings.ReplaceAll(buf.keep(), "<no value>", "")
	}
	return rendered, nil
}

func helmParseError(filename string, err error) error {
	tokens := strings.Split(err.Error(), ": ")
	if len(tokens) == 1 {
		return fmt.Errorf("parse error in (%s): %s", filename, err)
	}
	return fmt.Errorf("parse error at (%s): %s", tokens[1], tokens[len(tokens)-1])
}

// helmExecError shortens an execution error as helm does, keeping a limit error inside it reachable.
func helmExecError(filename string, err error) error {
	if _, ok := err.(template.ExecError); !ok {
		return err
	}
	tokens := strings.SplitN(err.Error(), ": ", 3)
	if len(tokens) != 3 {
		return fmt.Errorf("execution error in (%s): %w", filename, err)
	}
	if parts := helmWarnRegex.FindStringSubmatch(tokens[2]); len(parts) >= 2 {
		return fmt.Errorf("execution error at (%s): %s", tokens[1], parts[1])
	}
	return err
}

func helmSortTemplates(tpls map[string]helmRenderable) []string {
	keys := make([]string, 0, len(tpls))
	for key := range tpls {
		keys = append(keys, key)
	}
	// Deeper paths first; among equals, reverse lexical order (helm's sort.Reverse(byPathLen)).
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		ca, cb := strings.Count(a, "/"), strings.Count(b, "/")
		if ca == cb {
			return a > b
		}
		return ca > cb
	})
	return keys
}

// helmAllTemplates collects the templates of a chart and its dependencies with their scoped values.
func helmAllTemplates(c *chart.Chart, vals chartutil.Values) map[string]helmRenderable {
	templates := make(map[string]helmRenderable)
	helmRecAllTpls(c, templates, vals)
	return templates
}

func helmRecAllTpls(c *chart.Chart, templates map[string]helmRenderable, vals chartutil.Values) map[string]any {
	subCharts := make(map[string]any)
	chartMetaData := struct {
		chart.Metadata
		IsRoot bool
	}{*c.Metadata, c.IsRoot()}
	next := map[string]any{
		"Chart":        chartMetaData,
		"Files":        newChartFiles(c.Files),
		"Release":      vals["Release"],
		"Capabilities": vals["Capabilities"],
		"Values":       make(chartutil.Values),
		"Subcharts":    subCharts,
	}
	if c.IsRoot() {
		next["Values"] = vals["Values"]
	} else if vs, err := vals.Table("Values." + c.Name()); err == nil {
		next["Values"] = vs
	}
	for _, child := range c.Dependencies() {
		subCharts[child.Name()] = helmRecAllTpls(child, templates, next)
	}
	newParentID := c.ChartFullPath()
	for _, t := range c.Templates {
		if t == nil {
			continue
		}
		if strings.EqualFold(c.Metadata.Type, "library") && !strings.HasPrefix(filepath.Base(t.Name), "_") {
			continue
		}
		templates[path.Join(newParentID, t.Name)] = helmRenderable{
			tpl:      string(t.Data),
			vals:     next,
			basePath: path.Join(newParentID, "templates"),
		}
	}
	return next
}

// chartFiles is .Files: the chart's non-template files by path.
type chartFiles map[string][]byte

func newChartFiles(from []*chart.File) chartFiles {
	files := make(chartFiles)
	for _, f := range from {
		files[f.Name] = f.Data
	}
	return files
}

// GetBytes is a file's raw content, empty when there is no such file.
func (f chartFiles) GetBytes(name string) []byte {
	if v, ok := f[name]; ok {
		return v
	}
	return []byte{}
}

// Get is a file's content as a string.
func (f chartFiles) Get(name string) string { return string(f.GetBytes(name)) }

// Glob is the files whose path matches pattern.
func (f chartFiles) Glob(pattern string) chartFiles {
	g, err := glob.Compile(pattern, '/')
	if err != nil {
		g, _ = glob.Compile("**")
	}
	matched := newChartFiles(nil)
	for name, contents := range f {
		if g.Match(name) {
			matched[name] = contents
		}
	}
	return matched
}

// AsConfig is the files as a ConfigMap's data (base names to content, YAML).
func (f chartFiles) AsConfig() string {
	if f == nil {
		return ""
	}
	m := make(map[string]string)
	for k, v := range f {
		m[path.Base(k)] = string(v)
	}
	return toYAML(m)
}

// AsSecrets is the files as a Secret's data (base names to base64 content, YAML).
func (f chartFiles) AsSecrets() string {
	if f == nil {
		return ""
	}
	m := make(map[string]string)
	for k, v := range f {
		m[path.Base(k)] = base64.StdEncoding.EncodeToString(v)
	}
	return toYAML(m)
}

// Lines is a file's lines.
func (f chartFiles) Lines(path string) []string {
	if f == nil || len(f[path]) == 0 {
		return []string{}
	}
	s := string(f[path])
	if s[len(s)-1] == '\n' {
		s = s[:len(s)-1]
	}
	return strings.Split(s, "\n")
}

func fromTOML(src string) map[string]any {
	out := make(map[string]any)
	if err := toml.Unmarshal([]byte(src), &out); err != nil {
		out["Error"] = err.Error()
	}
	return out
}

// toYAMLPretty marshals with two-space indentation, as helm's does.
func toYAMLPretty(v any) string {
	var data bytes.Buffer
	encoder := goyaml.NewEncoder(&data)
	encoder.SetIndent(2)
	if err := encoder.Encode(v); err != nil {
		return ""
	}
	return strings.TrimSuffix(data.String(), "\n")
}

func fromYAMLArray(src string) []any {
	out := []any{}
	if err := yaml.Unmarshal([]byte(src), &out); err != nil {
		out = []any{err.Error()}
	}
	return out
}

func fromJSONArray(src string) []any {
	out := []any{}
	if err := json.Unmarshal([]byte(src), &out); err != nil {
		out = []any{err.Error()}
	}
	return out
}
