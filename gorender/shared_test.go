package main

// Shared values without a copy: which templates may change what they are given (MayChange), that the seed's
// templates are read without copies, and that a template that can change them still gets its own.

import (
	"encoding/json"
	"testing"
	"text/template"
)

func TestMayChangeJudgesWhatATemplateCanWriteInto(t *testing.T) {
	cases := []struct {
		text string
		want bool
	}{
		{`{{ .plan.name }} {{ printf "%v" (dict "a" .plan) }}`, false},
		{`{{ $m := dict }}{{ $_ := set $m "a" .plan }}{{ $_ = unset $m "b" }}`, false},
		{`{{ $m := dict }}{{ "v" | set $m "k" }}`, false},
		{`{{ with $m := dict }}{{ $_ := set $m "a" 1 }}{{ end }}`, false},
		{`{{ $_ := set .plan "a" 1 }}`, true},
		{`{{ $_ := unset .plan "name" }}`, true},
		{`{{ $_ := set $ "a" 1 }}`, true},
		{`{{ $m := .plan }}{{ $_ := set $m "a" 1 }}`, true},
		{`{{ $m := dict }}{{ $m = .plan }}{{ $_ := set $m "a" 1 }}`, true},
		{`{{ $m := dict }}{{ $_ := set $m.a "k" 1 }}`, true},
		{`{{ range $k, $v := dict "a" .plan }}{{ $_ := set $v "x" 1 }}{{ end }}`, true},
		{`{{ $m := dict "s" .plan.spec }}{{ $_ := merge $m (dict "s" (dict "x" 1)) }}`, true},
		{`{{ $m := dict }}{{ $_ := mustMergeOverwrite $m .plan }}`, true},
		{`{{ .plan | set "k" "v" }}`, true},
		{`{{ define "x" }}{{ $_ := set . "a" 1 }}{{ end }}{{ template "x" .plan }}`, true},
		{`{{ if .a }}{{ else }}{{ $_ := set (dict) "a" 1 }}{{ end }}`, true},
	}
	for _, c := range cases {
		tmpl := template.Must(template.New("t").Funcs(funcMap(1 << 20)).Parse(c.text))
		if got := NewTemplates().MayChange(tmpl); got != c.want {
			t.Errorf("MayChange(%s) = %v, want %v", c.text, got, c.want)
		}
	}
}

func TestTheSeedsTemplatesReadSharedValuesWithoutACopy(t *testing.T) {
	s := NewServer()
	values := zalandoValues(t, true)
	planJSON, _ := json.Marshal(values["plan"])
	delete(values, "plan")
	for i, action := range []string{"provision", "status", "provision", "status"} {
		req := Request{Name: action, Template: zalandoTemplate(t, action), Values: values, Shared: map[string]string{"plan": "p"}}
		if i == 0 {
			req.Blobs = map[string]json.RawMessage{"p": planJSON}
		}
		mustRender(t, s, req)
	}
	if s.blobs.copies != 0 {
		t.Fatalf("%d copies of the plan for templates that cannot change it", s.blobs.copies)
	}
}

func TestATemplateThatCanChangeASharedValueChangesOnlyItsOwnCopy(t *testing.T) {
	s := NewServer()
	blob := json.RawMessage(`{"spec":{"size":1}}`)
	changing := `{{ $m := dict "spec" .plan.spec }}{{ $_ := mergeOverwrite $m (dict "spec" (dict "size" 9)) }}{{ .plan.spec.size }}`
	first := mustRender(t, s, Request{Name: "t", Template: changing, Shared: map[string]string{"plan": "k"}, Blobs: map[string]json.RawMessage{"k": blob}})
	again := mustRender(t, s, Request{Name: "t", Template: `{{ .plan.spec.size }}`, Shared: map[string]string{"plan": "k"}})
	if first != "9" || again != "1" || s.blobs.copies != 1 {
		t.Fatalf("got %q then %q with %d copies", first, again, s.blobs.copies)
	}
}
