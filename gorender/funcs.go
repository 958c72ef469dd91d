package main

// The gotemplate function map: sprig's text functions, less what would leave the sandbox, plus the functions
// Service Fabrik's interoperator adds (b64enc/b64dec that fail on bad input, unmarshalJSON/marshalJSON,
// toToml, toYaml/fromYaml through sigs.k8s.io/yaml, toJson/fromJson).
//
// Removed from sprig, so a template cannot read the process or reach the network:
//   env, expandenv   - the renderer's environment (helm removes them too);
//   getHostByName    - a DNS lookup.
// Bounded, so a template cannot build a value larger than the output limit before it is written:
//   repeat, until, untilStep, seq (their result size is checked against Limits.MaxOutputBytes).

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"text/template"

	"github.com/BurntSushi/toml"
	"github.com/Masterminds/sprig/v3"
	"sigs.k8s.io/yaml"
)

// Removed lists the sprig functions the sandbox takes away; a template using one fails to parse with
// `function "env" not defined`.
var Removed = []string{"env", "expandenv", "getHostByName"}

// funcMap builds the function map for one render; maxBytes bounds the amplifying functions.
func funcMap(maxBytes int64) template.FuncMap {
	funcs := sprig.TxtFuncMap()
	for _, name := range Removed {
		delete(funcs, name)
	}
	for name, fn := range serviceFabrikFuncs() {
		funcs[name] = fn
	}
	for name, fn := range boundedFuncs(funcs, maxBytes) {
		funcs[name] = fn
	}
	return funcs
}

func serviceFabrikFuncs() template.FuncMap {
	return template.FuncMap{
		"b64enc":        func(src string) string { return base64.StdEncoding.EncodeToString([]byte(src)) },
		"b64dec":        b64dec,
		"unmarshalJSON": unmarshalJSON,
		"marshalJSON":   marshalJSON,
		"toToml":        toTOML,
		"toYaml":        toYAML,
		"fromYaml":      fromYAML,
		"toJson":        toJSON,
		"fromJson":      fromJSON,
	}
}

func b64dec(src string) (string, error) {
	decoded, err := base64.StdEncoding.DecodeString(src)
	if err != nil {
		return "", fmt.Errorf("b64dec: not base64: %v", err)
	}
	return string(decoded), nil
}

func unmarshalJSON(src string) (map[string]any, error) {
	out := map[string]any{}
	if err := json.Unmarshal([]byte(src), &out); err != nil {
		return nil, fmt.Errorf("unmarshalJSON: %v", err)
	}
	return out, nil
}

func marshalJSON(src map[string]any) (string, error) {
	out, err := json.Marshal(src)
	return string(out), err
}

// toYAML marshals like Service Fabrik and helm do: errors become "", the trailing newline is dropped.
func toYAML(v any) string {
	data, err := yaml.Marshal(v)
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(data), "\n")
}

// fromYAML tolerates errors as Service Fabrik does: the message lands in m["Error"].
func fromYAML(src string) map[string]any {
	out := map[string]any{}
	if err := yaml.Unmarshal([]byte(src), &out); err != nil {
		out["Error"] = err.Error()
	}
	return out
}

func toTOML(v any) string {
	var buf bytes.Buffer
	if err := toml.NewEncoder(&buf).Encode(v); err != nil {
		return err.Error()
	}
	return buf.String()
}

func toJSON(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(data)
}

func fromJSON(src string) map[string]any {
	out := map[string]any{}
	if err := json.Unmarshal([]byte(src), &out); err != nil {
		out["Error"] = err.Error()
	}
	return out
}

// limitError is what a bounded function returns when its result would be too large.
func limitError(what string, size, limit int64) error {
	return &RenderError{Kind: "limit", Message: fmt.Sprintf("%s would be %d bytes/items, over the limit of %d", what, size, limit)}
}

// boundedFuncs wraps the sprig functions whose result can dwarf their input with a size check made before
// the work, as rendering/limits.py does for jinja2.
func boundedFuncs(base template.FuncMap, maxBytes int64) template.FuncMap {
	repeat := base["repeat"].(func(int, string) string)
	until := base["until"].(func(int) []int)
	untilStep := base["untilStep"].(func(int, int, int) []int)
	seq := base["seq"].(func(...int) string)
	return template.FuncMap{
		"repeat": func(count int, str string) (string, error) {
			if size := int64(count) * int64(len(str)); size > maxBytes {
				return "", limitError("repeat", size, maxBytes)
			}
			return repeat(count, str), nil
		},
		"until": func(count int) ([]int, error) {
			if n := abs64(int64(count)); n > maxBytes {
				return nil, limitError("until", n, maxBytes)
			}
			return until(count), nil
		},
		"untilStep": func(start, stop, step int) ([]int, error) {
			if step != 0 {
				if n := abs64(int64(stop-start) / int64(step)); n > maxBytes {
					return nil, limitError("untilStep", n, maxBytes)
				}
			}
			return untilStep(start, stop, step), nil
		},
		"seq": func(params ...int) (string, error) {
			if len(params) > 0 {
				first, last, step := int64(1), int64(params[len(params)-1]), int64(1)
				if len(params) > 1 {
					first = int64(params[0])
				}
				if len(params) == 3 && params[1] != 0 {
					step = int64(params[1])
				}
				if n := abs64((last - first) / step); n > maxBytes {
					return "", limitError("seq", n, maxBytes)
				}
			}
			return seq(params...), nil
		},
	}
}

func abs64(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}
