package main

// Every size-growing function refuses a result over the output limit before building it, in a gotemplate
// and in a helm chart alike; the render ends as a limit error located at the call, and the process
// allocates a small multiple of the limit at most (today's bombs allocated 0.4 to 1 GB).

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"runtime"
	"strings"
	"testing"
)

// bombLimits: a 1 MiB output limit, the default.
var bombLimits = Limits{TimeoutMs: 5000, MaxOutputBytes: 1 << 20}

// many is 60 000 numbers: 120 KB as the values template writes them, over 1 MiB as fmt or JSON could print
// them (each number counts as the 24 bytes a float may take); in a gotemplate it is a request value, in a
// chart a value of the values template.
var many = func() []any {
	out := make([]any, 60000)
	for i := range out {
		out[i] = int64(1)
	}
	return out
}()

const manyValues = "many: [{{ range until 59999 }}1, {{ end }}1]\n"

// setup builds inputs for the bombs with bounded functions: a string just under the limit ($s, 900 KB), a
// string of characters JSON escapes ($lt, 300 KB of "<"), a list of 20 000 short strings ($many).
const setup = `{{ $s := repeat 900000 "x" }}{{ $lt := repeat 300000 "<" }}{{ $h := repeat 100000 "x" }}` +
	`{{ $many := splitList "," (repeat 20000 "abcdefghij,") }}`

var bombs = []struct {
	reason   string
	function string
	template string
	// want is the message (after the function's name) the limit error carries.
	want string
}{
	{"indent pads every line", "indent", `{{ $x := indent 400000000 "a" }}`, "would be 400000002 bytes"},
	{"nindent too", "nindent", `{{ $x := nindent 400000000 "a" }}`, "would be"},
	{"repeat multiplies", "repeat", `{{ $x := repeat 100000000 "ab" }}`, "would be 200000000 bytes"},
	{"print doubles a string", "print", `{{ $x := "0123456789abcdef" }}{{ range until 40 }}{{ $x = print $x $x }}{{ end }}`, "over the limit"},
	{"println doubles a string", "println", `{{ $x := "0123456789abcdef" }}{{ range until 40 }}{{ $x = println $x $x }}{{ end }}`, "over the limit"},
	{"printf doubles a string", "printf", `{{ $x := "0123456789abcdef" }}{{ range until 40 }}{{ $x = printf "%s%s" $x $x }}{{ end }}`, "over the limit"},
	{"printf pads to its width", "printf", `{{ printf "%999999999d" 1 }}`, "over the limit"},
	{"printf takes a width from an argument", "printf", `{{ printf "%*d" 999999999 1 }}`, "over the limit"},
	{"cat doubles a string", "cat", `{{ $x := "0123456789abcdef" }}{{ range until 40 }}{{ $x = cat $x $x }}{{ end }}`, "over the limit"},
	{"join repeats its separator", "join", `{{ join $s (list 1 2 3) }}`, "over the limit"},
	{"replace multiplies its hits", "replace", `{{ replace "x" "yyyyyyyyyy" $s }}`, "over the limit"},
	{"replace of the empty string hits every character", "replace", `{{ replace "" "yy" $s }}`, "over the limit"},
	{"quote of many values", "quote", `{{ quote $s $s }}`, "over the limit"},
	{"squote of many values", "squote", `{{ squote $s $s }}`, "over the limit"},
	{"b64enc grows by a third", "b64enc", `{{ b64enc $s }}`, "over the limit"},
	{"b32enc grows by three fifths", "b32enc", `{{ b32enc $s }}`, "over the limit"},
	{"wrapWith adds a separator per width", "wrapWith", `{{ wrapWith 1 "----------" $h }}`, "over the limit"},
	{"toString of a long list", "toString", `{{ toString MANY }}`, "over the limit"},
	{"toStrings of a long list", "toStrings", `{{ $x := toStrings MANY }}`, "over the limit"},
	{"sortAlpha prints each item", "sortAlpha", `{{ $x := sortAlpha MANY }}`, "over the limit"},
	{"js escapes each byte to six", "js", `{{ js $lt }}`, "over the limit"},
	{"html escapes each byte to four", "html", `{{ html $lt }}`, "over the limit"},
	{"urlquery escapes each byte to three", "urlquery", `{{ urlquery $lt $lt }}`, "over the limit"},
	{"randAlphaNum of a huge length", "randAlphaNum", `{{ randAlphaNum 100000000 }}`, "over the limit"},
	{"randBytes of a huge length", "randBytes", `{{ randBytes 100000000 }}`, "over the limit"},
	{"toJson escapes", "toJson", `{{ toJson $lt }}`, "over the limit"},
	{"mustToJson escapes", "mustToJson", `{{ mustToJson $lt }}`, "over the limit"},
	{"toPrettyJson escapes", "toPrettyJson", `{{ toPrettyJson $lt }}`, "over the limit"},
	{"toRawJson", "toRawJson", `{{ toRawJson $lt }}`, "over the limit"},
	{"toYaml of a large value", "toYaml", `{{ toYaml $lt }}`, "over the limit"},
	{"toToml of a large value", "toToml", `{{ toToml MANY }}`, "over the limit"},
	{"regexReplaceAll expands its references per match", "regexReplaceAll", `{{ regexReplaceAll "x+" $s "${0}${0}" }}`, "over the limit"},
	{"regexReplaceAllLiteral per match", "regexReplaceAllLiteral", `{{ regexReplaceAllLiteral "x" $s "yy" }}`, "over the limit"},
	{"regexFindAll makes an item per match", "regexFindAll", `{{ $x := regexFindAll "x" $s -1 }}`, "over the limit"},
	{"regexSplit makes an item per match", "regexSplit", `{{ $x := regexSplit "" $s -1 }}`, "over the limit"},
	{"split makes an entry per character", "split", `{{ $x := split "" $s }}`, "over the limit"},
	{"splitList makes an item per character", "splitList", `{{ $x := splitList "" $s }}`, "over the limit"},
	{"splitn", "splitn", `{{ $x := splitn "x" 100000000 $s }}`, "over the limit"},
	{"list doubles by nesting", "list", `{{ $l := list "0123456789" }}{{ range until 40 }}{{ $l = list $l $l }}{{ end }}`, "over the limit"},
	{"tuple too", "tuple", `{{ $l := tuple $s $s }}`, "over the limit"},
	{"append grows a list", "append", `{{ $l := list }}{{ range until 100 }}{{ $l = append $l $h }}{{ end }}`, "over the limit"},
	{"prepend grows a list", "prepend", `{{ $l := list }}{{ range until 100 }}{{ $l = prepend $l $h }}{{ end }}`, "over the limit"},
	{"concat joins lists", "concat", `{{ $l := list $h $h $h $h $h $h }}{{ $x := concat $l $l }}`, "over the limit"},
	{"chunk adds a list per chunk", "chunk", `{{ $x := chunk 1 MANY }}`, "over the limit"},
	{"dict of large values", "dict", `{{ $d := dict "a" $s "b" $s }}`, "over the limit"},
	{"set grows a dict", "set", `{{ $d := dict }}{{ range $i := until 100 }}{{ $_ := set $d (print $i) $h }}{{ end }}`, "over the limit"},
	{"set of a dict into itself", "set", `{{ $d := dict }}{{ $_ := set $d "a" $d }}{{ $d }}`, "contains itself"},
	{"merge of a dict into itself", "merge", `{{ $d := dict "a" 1 }}{{ $_ := merge $d (dict "b" $d) }}{{ $d }}`, "contains itself"},
	{"mergeOverwrite grows a dict", "mergeOverwrite", `{{ $d := dict "a" $s }}{{ $_ := mergeOverwrite $d (dict "b" $s) }}`, "over the limit"},
	{"deepCopy of a large value", "deepCopy", `{{ $x := deepCopy MANY }}`, "over the limit"},
	{"until", "until", `{{ $x := until 100000000 }}`, "would be 100000000 bytes/items"},
	{"seq", "seq", `{{ $x := seq 100000000 }}`, "over the limit"},
}

// allocated is how many bytes f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// maxAllocated is what a refused bomb may allocate: its setup's strings and lists, and the estimates.
const maxAllocated = 24 << 20

func checkBomb(t *testing.T, resp Response, function, want, template string) {
	t.Helper()
	if resp.OK {
		t.Fatalf("rendered %d bytes, want a limit error", len(resp.Output))
	}
	if resp.Error.Kind != "limit" || resp.Error.Fatal || !strings.Contains(resp.Error.Message, function) || !strings.Contains(resp.Error.Message, want) {
		t.Fatalf("want a limit error from %s (%q), got %+v", function, want, resp.Error)
	}
	if resp.Error.Template != template || resp.Error.Line == 0 {
		t.Fatalf("want the error located in %s, got %+v", template, resp.Error)
	}
}

func TestEverySizeGrowingFunctionIsRefusedBeforeItAllocates(t *testing.T) {
	for _, bomb := range bombs {
		t.Run(bomb.reason, func(t *testing.T) {
			var resp Response
			used := allocated(func() {
				text := setup + "\n" + strings.ReplaceAll(bomb.template, "MANY", ".many")
				resp = render(t, NewServer(), Request{Name: "provision", Template: text, Values: map[string]any{"many": many}, Limits: bombLimits})
			})
			checkBomb(t, resp, bomb.function, bomb.want, "provision")
			if used > maxAllocated {
				t.Errorf("allocated %d MiB before refusing", used>>20)
			}
		})
	}
}

func TestEverySizeGrowingFunctionIsRefusedInAHelmChart(t *testing.T) {
	for _, bomb := range bombs {
		t.Run(bomb.reason, func(t *testing.T) {
			text := setup + "\n" + strings.ReplaceAll(bomb.template, "MANY", ".Values.many")
			values := ""
			if strings.Contains(bomb.template, "MANY") {
				values = manyValues
			}
			chart := chartWith(t, map[string]string{"templates/bomb.yaml": text})
			var resp Response
			used := allocated(func() {
				resp = render(t, NewServer(), Request{Engine: "helm", Name: "provision", Chart: chart, Template: values, Release: ReleaseInfo{Name: "r", Namespace: "n"}, Limits: bombLimits})
			})
			checkBomb(t, resp, bomb.function, bomb.want, "bombs/templates/bomb.yaml")
			if used > maxAllocated+uint64(len(values))<<18 { // helm copies and coalesces 60 000 values several times
				t.Errorf("allocated %d MiB before refusing", used>>20)
			}
		})
	}
}

func TestHelmsOwnFunctionsAreBounded(t *testing.T) {
	cases := []struct{ reason, function, template string }{
		{"toYamlPretty", "toYamlPretty", `{{ toYamlPretty $lt }}`},
		{"tpl writes within the limit", "", `{{ tpl "{{ range until 1000000 }}xxxxxxxxxx{{ end }}" . }}`},
		{"include writes within the limit", "", `{{ define "big" }}{{ repeat 900000 "x" }}{{ end }}{{ define "r" }}{{ include "big" . }}{{ include "r" . }}{{ end }}{{ include "r" . }}`},
		{"a chart's output is bounded as it is written", "", `{{ range until 1000000 }}{{ $h }}{{ end }}`},
	}
	for _, c := range cases {
		t.Run(c.reason, func(t *testing.T) {
			chart := chartWith(t, map[string]string{"templates/bomb.yaml": setup + "\n" + c.template})
			var resp Response
			used := allocated(func() {
				resp = render(t, NewServer(), Request{Engine: "helm", Name: "provision", Chart: chart, Release: ReleaseInfo{Name: "r", Namespace: "n"}, Limits: bombLimits})
			})
			if resp.OK || resp.Error.Kind != "limit" || !strings.Contains(resp.Error.Message, c.function) {
				t.Fatalf("want a limit error, got ok=%v %+v", resp.OK, resp.Error)
			}
			if used > 3*maxAllocated {
				t.Errorf("allocated %d MiB before refusing", used>>20)
			}
		})
	}
}

func TestBoundedFunctionsStillWork(t *testing.T) {
	out := mustRender(t, NewServer(), Request{Name: "p", Limits: bombLimits, Template: `{{ indent 2 "a\nb" }}|{{ print "a" 1 }}|{{ printf "%05d" 7 }}|` +
		`{{ join "," (list 1 2) }}|{{ replace "a" "bb" "aXa" }}|{{ toJson (dict "k" (list 1 "<")) }}|{{ b64enc "hi" }}|` +
		`{{ $d := dict }}{{ $_ := set $d "a" (dict "b" 1) }}{{ $_ := merge $d (dict "c" 2) }}{{ toYaml $d | nindent 1 }}|` +
		`{{ regexReplaceAll "(a)" "xax" "${1}$1" }}|{{ len (splitList "," "a,b,c") }}|{{ append (list 1) 2 }}|{{ urlquery "a b" }}`})
	want := "  a\n  b|a1|00007|1,2|bbXbb|{\"k\":[1,\"\\u003c\"]}|aGk=|\n a:\n   b: 1\n c: 2|xaax|3|[1 2]|a+b"
	if out != want {
		t.Fatalf("got  %q\nwant %q", out, want)
	}
}

func TestHelmLogLinesKeepNoValues(t *testing.T) {
	var out bytes.Buffer
	w := withoutValues{out: &out}
	if _, err := w.Write([]byte("warning: destination for password is a table. Ignoring non-table value (s3cr3t)\n")); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); strings.Contains(got, "s3cr3t") || !strings.HasPrefix(got, "gorender: log: warning: destination for ...") {
		t.Fatalf("got %q", got)
	}
}

// chartWith packs a chart named "bombs" with the given files (beside its Chart.yaml).
func chartWith(t testing.TB, files map[string]string) []byte {
	t.Helper()
	files["Chart.yaml"] = "apiVersion: v2\nname: bombs\nversion: 0.1.0\n"
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for name, text := range files {
		if err := tw.WriteHeader(&tar.Header{Name: "bombs/" + name, Mode: 0o644, Size: int64(len(text))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(text)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
