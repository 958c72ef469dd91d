package main

// The gotemplate function map: sprig's text functions, less what would leave the sandbox, plus the functions
// Service Fabrik's interoperator adds (b64enc/b64dec that fail on bad input, unmarshalJSON/marshalJSON,
// toToml, toYaml/fromYaml through sigs.k8s.io/yaml, toJson/fromJson).
//
// Removed from sprig, so a template cannot read the process or reach the network:
//   env, expandenv   - the renderer's environment (helm removes them too);
//   getHostByName    - a DNS lookup.
// Bounded, so a template cannot build a value larger than the output limit: every function whose result can
// outgrow its arguments (bounds.go).

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
	boundFuncs(funcs, maxBytes)
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

// rangeSizes are the estimates of the functions that make a list of numbers: how many items it would have.
var rangeSizes = map[string]estimator{
	"until": func(args []any, _ int64) (int64, error) { return abs64(integer(args[0])), nil },
	"untilStep": func(args []any, _ int64) (int64, error) {
		start, stop, step := integer(args[0]), integer(args[1]), integer(args[2])
		if step == 0 {
			return 0, nil
		}
		return abs64((stop - start) / step), nil
	},
	"seq": func(args []any, _ int64) (int64, error) {
		if len(args) == 0 {
			return 0, nil
		}
		first, last, step := int64(1), integer(args[len(args)-1]), int64(1)
		if len(args) > 1 {
			first = integer(args[0])
		}
		if len(args) == 3 && integer(args[1]) != 0 {
			step = integer(args[1])
		}
		return abs64((last - first) / step), nil
	},
}

func abs64(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}
