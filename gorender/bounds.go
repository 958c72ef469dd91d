package main

// Every function a template can call whose result can be larger than its arguments is wrapped here with an
// estimate of that result made before the function runs; past Limits.MaxOutputBytes the call fails with a
// limit error (which text/template reports at the call's line and column) and nothing is allocated. The
// same wrappers serve gotemplate (funcs.go) and helm (helmengine.go), and they override text/template's own
// print, printf, println, html, js and urlquery, which a template can call like any function.
//
// The estimate is the size the result prints as (sizes.go): a string's length, a list's or dict's printed
// size. Bounding what a value prints as, not only its item count, is what keeps `{{ $l }}` and `toJson $l`
// bounded when $l holds the same large value many times over. A value that contains itself (`set $d "a"
// $d`) is refused too: fmt and the encoders would recurse until the stack ran out.

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"text/template"
	"unicode/utf8"
)

// estimator returns the size a call's result would have, from its arguments (variadic ones flattened).
type estimator func(args []any, max int64) (int64, error)

var errorType = reflect.TypeOf((*error)(nil)).Elem()

// limitError is what a bounded function returns when its result would be too large.
func limitError(what string, size, limit int64) error {
	return &RenderError{Kind: "limit", Message: fmt.Sprintf("%s would be %d bytes/items, over the limit of %d", what, size, limit)}
}

// guard wraps fn (any function text/template accepts) so that it first asks estimate how large its result
// would be and fails with a limit error past max. The wrapper has fn's parameters and returns (result, error).
func guard(name string, fn any, estimate estimator, max int64) any {
	fv := reflect.ValueOf(fn)
	ft := fv.Type()
	in := make([]reflect.Type, ft.NumIn())
	for i := range in {
		in[i] = ft.In(i)
	}
	outType := ft.Out(0)
	wrapped := reflect.FuncOf(in, []reflect.Type{outType, errorType}, ft.IsVariadic())
	return reflect.MakeFunc(wrapped, func(args []reflect.Value) []reflect.Value {
		if err := check(name, estimate, flatten(args, ft.IsVariadic()), max); err != nil {
			return []reflect.Value{reflect.Zero(outType), reflect.ValueOf(&err).Elem()}
		}
		var results []reflect.Value
		if ft.IsVariadic() {
			results = fv.CallSlice(args)
		} else {
			results = fv.Call(args)
		}
		if len(results) == 1 {
			results = append(results, reflect.Zero(errorType))
		}
		return results
	}).Interface()
}

// check runs an estimate and turns an excess into the error a template sees.
func check(name string, estimate estimator, args []any, max int64) error {
	size, err := estimate(args, max)
	var large *tooLarge
	if errors.As(err, &large) && large.reason != "over budget" {
		return &RenderError{Kind: "limit", Message: fmt.Sprintf("%s: the result would be refused: %s", name, large.reason)}
	}
	if err != nil || size > max {
		return limitError(name, size, max)
	}
	return nil
}

func flatten(args []reflect.Value, variadic bool) []any {
	out := make([]any, 0, len(args))
	for i, arg := range args {
		if variadic && i == len(args)-1 {
			for j := 0; j < arg.Len(); j++ {
				out = append(out, arg.Index(j).Interface())
			}
			continue
		}
		out = append(out, arg.Interface())
	}
	return out
}

// boundFuncs replaces every size-growing function of funcs with its guarded form (functions funcs lacks are
// added only where text/template has a builtin of that name).
func boundFuncs(funcs template.FuncMap, max int64) {
	for name, estimate := range estimators {
		fn, ok := funcs[name]
		if !ok {
			fn, ok = builtins[name]
		}
		if ok {
			funcs[name] = guard(name, fn, estimate, max)
		}
	}
}

// builtins are text/template's own functions that can grow their input; a function map entry of the same
// name takes precedence over a builtin, so these are replaced by their guarded forms.
var builtins = map[string]any{
	"print":    fmt.Sprint,
	"printf":   fmt.Sprintf,
	"println":  fmt.Sprintln,
	"html":     template.HTMLEscaper,
	"js":       template.JSEscaper,
	"urlquery": template.URLQueryEscaper,
}

// -- estimators -------------------------------------------------------------------------------------------------

func str(v any) string {
	s, _ := v.(string)
	return s
}

func integer(v any) int64 {
	switch n := v.(type) {
	case int:
		return int64(n)
	case int64:
		return n
	case int32:
		return int64(n)
	}
	return 0
}

func positive(n int64) int64 {
	if n < 0 {
		return 0
	}
	return n
}

// printed: the result is the arguments printed together, times factor (escaping functions grow each byte).
func printed(factor int64) estimator {
	return func(args []any, max int64) (int64, error) {
		size, err := printedSizes(args, max/factor+1)
		return size * factor, err
	}
}

// value: the result is a value built from the arguments (a list, dict or copy of them).
func value(args []any, max int64) (int64, error) { return printedSizes(args, max) }

// encoded: the result is the argument encoded as JSON, YAML or TOML.
func encoded(args []any, max int64) (int64, error) { return encodedSize(args[0], max) }

func indentSize(args []any, _ int64) (int64, error) {
	width, text := positive(integer(args[0])), str(args[1])
	return int64(len(text)) + int64(strings.Count(text, "\n")+1)*width + 1, nil
}

func repeatSize(args []any, _ int64) (int64, error) {
	return positive(integer(args[0])) * int64(len(str(args[1]))), nil
}

func replaceSize(args []any, _ int64) (int64, error) {
	old, replacement, src := str(args[0]), str(args[1]), str(args[2])
	hits := int64(utf8.RuneCountInString(src) + 1)
	if old != "" {
		hits = int64(strings.Count(src, old))
	}
	return int64(len(src)) + hits*positive(int64(len(replacement)-len(old))), nil
}

func joinSize(args []any, max int64) (int64, error) {
	items := reflect.ValueOf(args[1])
	count := int64(1)
	if items.Kind() == reflect.Slice || items.Kind() == reflect.Array {
		count = int64(items.Len())
	}
	size, err := printedSize(args[1], max)
	return size + count*int64(len(str(args[0]))), err
}

func countSize(scale int64) estimator {
	return func(args []any, _ int64) (int64, error) { return positive(integer(args[0])) * scale / 3, nil }
}

func grownSize(num, den int64) estimator {
	return func(args []any, _ int64) (int64, error) { return int64(len(str(args[0])))*num/den + 8, nil }
}

func wrapSize(args []any, _ int64) (int64, error) {
	width, text := integer(args[0]), str(args[len(args)-1])
	separator := int64(1)
	if len(args) == 3 {
		separator = int64(len(str(args[1])))
	}
	if width < 1 {
		width = 1
	}
	return int64(len(text)) + (int64(len(text))/width+1)*separator, nil
}

// printfSize adds the widths and precisions a format asks for (`%999999999d` pads to a gigabyte) to the
// printed size of its arguments; a `*` width takes its value from an argument, so every integer argument
// counts as a possible width.
func printfSize(args []any, max int64) (int64, error) {
	format := str(args[0])
	size, err := printedSizes(args[1:], max)
	size += int64(len(format))
	for i := 0; i < len(format); i++ {
		if format[i] != '%' {
			continue
		}
		for i++; i < len(format) && strings.IndexByte("+-# 0", format[i]) >= 0; i++ {
		}
		number := int64(0)
		for ; i < len(format) && (format[i] >= '0' && format[i] <= '9' || format[i] == '.' || format[i] == '*'); i++ {
			switch c := format[i]; {
			case c == '.':
				size, number = size+number, 0
			case c == '*':
				for _, arg := range args[1:] {
					size += positive(integer(arg)) + positive(-integer(arg))
				}
			case number <= max:
				number = number*10 + int64(c-'0')
			}
		}
		size += number
	}
	return size, err
}

// splitSize: splitting makes one list item (or "_N" dict entry) per separator found.
func splitSize(args []any, _ int64) (int64, error) {
	separator, text := str(args[0]), str(args[len(args)-1])
	parts := int64(len(text) + 1)
	if separator != "" {
		parts = int64(strings.Count(text, separator) + 1)
	}
	if len(args) == 3 && integer(args[1]) > 0 {
		parts = min(parts, integer(args[1]))
	}
	return int64(len(text)) + parts*(elementCost(1)+8), nil
}

// matchesSize: the regex functions that return or replace matches; counts the matches (no more than can
// fit) and what each adds.
func matchesSize(kind string) estimator {
	return func(args []any, max int64) (int64, error) {
		re, err := regexp.Compile(str(args[0]))
		if err != nil {
			return 0, nil // the function itself reports the bad expression
		}
		text := str(args[1])
		limit := int(min(max/elementCost(1)+2, int64(len(text)+1)))
		if len(args) == 3 && kind != "replace" && kind != "literal" {
			if n := integer(args[2]); n >= 0 && int(n) < limit {
				limit = int(n)
			}
		}
		found := re.FindAllStringIndex(text, limit)
		size := int64(len(text))
		switch kind {
		case "replace":
			replacement := str(args[2])
			references := int64(strings.Count(replacement, "$"))
			for _, m := range found {
				size += int64(len(replacement)) + references*int64(m[1]-m[0])
			}
		case "literal":
			size += int64(len(found)) * int64(len(str(args[2])))
		default: // a list of the matches or of the parts between them
			size += int64(len(found)+1) * elementCost(1)
		}
		if len(found) == limit && limit > 0 && kind != "replace" && kind != "literal" {
			size = max64(size, int64(limit)*elementCost(1))
		}
		return size, nil
	}
}

// setSize: the dict after the new entry; refused if the value holds the dict itself.
func setSize(args []any, max int64) (int64, error) {
	d := reflect.ValueOf(args[0])
	s := &sizer{budget: max}
	if err := s.walk(d, 0); err != nil {
		return s.total, err
	}
	if d.Kind() == reflect.Map && d.Pointer() != 0 {
		s.onPath = map[uintptr]bool{d.Pointer(): true}
	}
	if err := s.add(elementCost(0) + stringSize(str(args[1]))); err != nil {
		return s.total, err
	}
	err := s.walk(reflect.ValueOf(args[2]), 1)
	return s.total, err
}

// mergeSize: the destination after merging the sources into it; refused if a source holds the destination.
func mergeSize(args []any, max int64) (int64, error) {
	d := reflect.ValueOf(args[0])
	s := &sizer{budget: max}
	if err := s.walk(d, 0); err != nil {
		return s.total, err
	}
	if d.Kind() == reflect.Map && d.Pointer() != 0 {
		s.onPath = map[uintptr]bool{d.Pointer(): true}
	}
	for _, src := range args[1:] {
		if err := s.walk(reflect.ValueOf(src), 0); err != nil {
			return s.total, err
		}
	}
	return s.total, nil
}

func chunkSize(args []any, max int64) (int64, error) {
	size, err := printedSize(args[1], max)
	items := reflect.ValueOf(args[1])
	if items.Kind() == reflect.Slice || items.Kind() == reflect.Array {
		per := max64(integer(args[0]), 1)
		size += (int64(items.Len())/per + 1) * elementCost(1)
	}
	return size, err
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// estimators names every bounded function. Functions not listed cannot make their result much larger than
// their arguments (trim, upper, substr, trunc, sha256sum, b64dec, get, keys, pick, ...).
var estimators = map[string]estimator{
	// strings
	"repeat":  repeatSize,
	"indent":  indentSize,
	"nindent": indentSize,
	"replace": replaceSize,
	"join":    joinSize,
	"cat":     printed(1),
	"quote":   printed(1),
	"squote":  printed(1),
	"print":   printed(1),
	"println": printed(1),
	"printf":  printfSize,
	"html":    printed(5),
	"js":      printed(6),
	// urlquery escapes each byte to at most three.
	"urlquery":  printed(3),
	"toString":  printed(1),
	"toStrings": printed(1),
	"sortAlpha": printed(1),
	"wrap":      wrapSize,
	"wrapWith":  wrapSize,
	"b64enc":    grownSize(4, 3),
	"b32enc":    grownSize(8, 5),
	// random strings of a given length (randBytes: base64 of that many bytes)
	"randAlphaNum": countSize(3),
	"randAlpha":    countSize(3),
	"randAscii":    countSize(3),
	"randNumeric":  countSize(3),
	"randBytes":    countSize(4),
	// encodings of whole values
	"toJson":           encoded,
	"toPrettyJson":     encoded,
	"toRawJson":        encoded,
	"mustToJson":       encoded,
	"mustToPrettyJson": encoded,
	"mustToRawJson":    encoded,
	"marshalJSON":      encoded,
	"toYaml":           encoded,
	"toYamlPretty":     encoded,
	"toToml":           encoded,
	// regular expressions
	"regexReplaceAll":            matchesSize("replace"),
	"mustRegexReplaceAll":        matchesSize("replace"),
	"regexReplaceAllLiteral":     matchesSize("literal"),
	"mustRegexReplaceAllLiteral": matchesSize("literal"),
	"regexFindAll":               matchesSize("list"),
	"mustRegexFindAll":           matchesSize("list"),
	"regexSplit":                 matchesSize("list"),
	"mustRegexSplit":             matchesSize("list"),
	// splitting a string into many items
	"split":     splitSize,
	"splitList": splitSize,
	"splitn":    splitSize,
	// lists and dicts
	"list":               value,
	"tuple":              value,
	"dict":               value,
	"append":             value,
	"push":               value,
	"mustAppend":         value,
	"mustPush":           value,
	"prepend":            value,
	"mustPrepend":        value,
	"concat":             value,
	"deepCopy":           value,
	"mustDeepCopy":       value,
	"chunk":              chunkSize,
	"mustChunk":          chunkSize,
	"set":                setSize,
	"merge":              mergeSize,
	"mustMerge":          mergeSize,
	"mergeOverwrite":     mergeSize,
	"mustMergeOverwrite": mergeSize,
}

func init() {
	for name, estimate := range rangeSizes {
		estimators[name] = estimate
	}
}
