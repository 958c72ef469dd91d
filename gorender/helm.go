package main

// helm: a chart archive rendered by helm's engine (adapted in helmengine.go so that it runs bounded), the way Service Fabrik's interoperator renders helm
// templates: the plan's values template (a gotemplate over the same variables) is rendered first and read as
// the release's values, then the chart's templates run with .Release, .Chart, .Values, .Capabilities and
// helm's functions (include, tpl, required, toYaml, ...). The chart's crds/ come first, partials (_*) and
// NOTES.txt are dropped, and the documents are joined with "---" in file order.
//
// Sandbox: the engine has no cluster client, so `lookup` answers an empty map as `helm template` does; DNS
// lookups are off (getHostByName answers ""); values.schema.json is not validated, because its $refs could
// make the renderer fetch URLs.

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"path"
	"sort"
	"strings"
	"sync"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
)

// Charts loads and caches chart archives by content.
type Charts struct {
	mu     sync.Mutex
	loaded map[[sha256.Size]byte]*chart.Chart
}

// NewCharts makes an empty cache.
func NewCharts() *Charts {
	return &Charts{loaded: map[[sha256.Size]byte]*chart.Chart{}}
}

// Load returns the chart in archive (a .tgz), loading it once per content.
func (c *Charts) Load(archive []byte) (*chart.Chart, error) {
	if len(archive) == 0 {
		return nil, &RenderError{Kind: "chart", Message: "no chart archive given (url or contentEncoded)"}
	}
	sum := sha256.Sum256(archive)
	c.mu.Lock()
	loaded, ok := c.loaded[sum]
	c.mu.Unlock()
	if ok {
		return loaded, nil
	}
	loaded, err := loader.LoadArchive(bytes.NewReader(archive))
	if err != nil {
		return nil, &RenderError{Kind: "chart", Message: fmt.Sprintf("not a helm chart archive: %v", err)}
	}
	c.mu.Lock()
	if len(c.loaded) >= maxCached/8 {
		c.loaded = map[[sha256.Size]byte]*chart.Chart{}
	}
	c.loaded[sum] = loaded
	c.mu.Unlock()
	return loaded, nil
}

// RenderChart renders a chart with the values rendered from valuesTemplate.
func RenderChart(templates *Templates, charts *Charts, req *Request) (string, error) {
	ch, err := charts.Load(req.Chart)
	if err != nil {
		return "", err
	}
	values := chartutil.Values{}
	if strings.TrimSpace(req.Template) != "" || req.TemplateKey != "" {
		tmpl, err := templates.ForRequest(req)
		if err != nil {
			return "", err
		}
		text, err := Execute(tmpl, req.Values, req.Limits)
		if err != nil {
			return "", err
		}
		values, err = chartutil.ReadValues([]byte(text))
		if err != nil {
			return "", &RenderError{Kind: "values", Template: req.Name, Message: fmt.Sprintf("the rendered values are not a YAML mapping: %v", err)}
		}
	}
	options := chartutil.ReleaseOptions{Name: req.Release.Name, Namespace: req.Release.Namespace, Revision: 1, IsInstall: true}
	top, err := chartutil.ToRenderValuesWithSchemaValidation(ch, values, options, chartutil.DefaultCapabilities, true)
	if err != nil {
		return "", &RenderError{Kind: "values", Message: fmt.Sprintf("chart %s: %v", ch.Name(), err)}
	}
	if err := chartutil.ProcessDependencies(ch, top); err != nil {
		return "", &RenderError{Kind: "chart", Message: fmt.Sprintf("chart %s: dependencies: %v", ch.Name(), err)}
	}
	files, err := helmEngine{budget: newOutputBudget(req.Limits)}.render(helmAllTemplates(ch, top))
	if err != nil {
		return "", unwrapLimit(err)
	}
	return joinManifests(ch, files, req.Limits.MaxOutputBytes)
}

// joinManifests puts the chart's CRDs first, then the rendered templates in file order, skipping partials,
// NOTES.txt and files that rendered to whitespace.
func joinManifests(ch *chart.Chart, files map[string]string, maxBytes int64) (string, error) {
	var docs []string
	for _, crd := range allCRDs(ch) {
		docs = append(docs, string(crd.File.Data))
	}
	names := make([]string, 0, len(files))
	for name := range files {
		base := path.Base(name)
		if strings.HasPrefix(base, "_") || strings.HasSuffix(base, "NOTES.txt") {
			continue
		}
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if strings.TrimSpace(files[name]) != "" {
			docs = append(docs, "# Source: "+name+"\n"+files[name])
		}
	}
	out := strings.Join(docs, "\n---\n")
	if int64(len(out)) > maxBytes {
		return "", &RenderError{Kind: "limit", Message: fmt.Sprintf("the rendered chart is larger than the limit of %d bytes", maxBytes)}
	}
	return out, nil
}

func allCRDs(ch *chart.Chart) []chart.CRD {
	crds := ch.CRDObjects()
	sort.Slice(crds, func(i, j int) bool { return crds[i].Filename < crds[j].Filename })
	return crds
}
