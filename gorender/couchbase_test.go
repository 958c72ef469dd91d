package main

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func renderCouchbase(t testing.TB, values map[string]any) (couchbaseResult, Response) {
	t.Helper()
	resp := render(t, NewServer(), Request{Engine: "couchbase", Name: "provision", Values: values})
	var out couchbaseResult
	if resp.OK {
		if err := json.Unmarshal([]byte(resp.Output), &out); err != nil {
			t.Fatal(err)
		}
	}
	return out, resp
}

func mustCouchbase(t testing.TB, values map[string]any) couchbaseResult {
	t.Helper()
	out, resp := renderCouchbase(t, values)
	if !resp.OK {
		t.Fatalf("render failed: %+v", resp.Error)
	}
	return out
}

func TestCouchbaseSeedExamplesRenderAsTheSeedShows(t *testing.T) {
	cases := []struct {
		fixture  string
		registry map[string]any
	}{
		{"my-secret", map[string]any{"instance-id": "camelot"}},
		{"optional-namespace", map[string]any{"instance-id": "camelot"}},
	}
	for _, c := range cases {
		tmpl := readYAML(t, "tests/data/seeds/couchbase/"+c.fixture+".template.yaml")
		want := readYAML(t, "tests/data/seeds/couchbase/"+c.fixture+".rendered.yaml")
		out := mustCouchbase(t, map[string]any{"registry": c.registry, "parameters": map[string]any{}, "templates": []any{tmpl}})
		if len(out.Objects) != 1 || !reflect.DeepEqual(out.Objects[0].Template, want) {
			t.Errorf("%s: rendered %#v, the seed shows %#v", c.fixture, out.Objects, want)
		}
	}
}

func TestCouchbaseAttributesKeepTheirTypeAndNullsAreRemoved(t *testing.T) {
	tmpl := map[string]any{"name": "t", "template": map[string]any{
		"replicas": `{{ parameter "/size" }}`,
		"labels":   `{{ parameter "/labels" }}`,
		"byName":   `{{ parameter "size" }}`,
		"missing":  `{{ parameter "/nope/deeper" }}`,
		"listed":   []any{`{{ list "a" (registry "instance-id") }}`, "plain {{ text"},
		"fallback": `{{ parameter "/nope" | default "x" }}`,
		"given":    `{{ parameter "/size" | default 7 }}`,
		"nested":   map[string]any{"gone": `{{ registry "unknown" }}`},
	}}
	out := mustCouchbase(t, map[string]any{
		"registry":   map[string]any{"instance-id": "camelot"},
		"parameters": map[string]any{"size": 3, "labels": map[string]any{"a": "b"}},
		"templates":  []any{tmpl},
	})
	want := map[string]any{
		"replicas": 3.0, "labels": map[string]any{"a": "b"}, "byName": 3.0,
		"listed": []any{[]any{"a", "camelot"}, "plain {{ text"}, "fallback": "x", "given": 3.0, "nested": map[string]any{},
	}
	if !reflect.DeepEqual(out.Objects[0].Template, want) {
		t.Fatalf("got %#v\nwant %#v", out.Objects[0].Template, want)
	}
}

func TestCouchbaseRequiredAndMalformedAttributesFail(t *testing.T) {
	for text, message := range map[string]string{
		`{{ parameter "/password" | required }}`: "required value is nil",
		`{{ registry "a" }} and more`:            "malformed",
		`{{ registry "a" }}-{{ registry "b" }}`:  "single template",
		`{{ nosuch }}`:                           `function "nosuch" not defined`,
		`{{ snippet "loop" }}`:                   "nest deeper",
	} {
		_, resp := renderCouchbase(t, map[string]any{
			"registry": map[string]any{"a": "x", "b": "y"}, "parameters": map[string]any{},
			"templates": []any{map[string]any{"name": "t", "template": map[string]any{"v": text}}},
			"snippets":  map[string]any{"loop": map[string]any{"template": map[string]any{"again": `{{ snippet "loop" }}`}}},
		})
		if resp.OK || !strings.Contains(resp.Error.Message, message) {
			t.Errorf("%s: want an error with %q, got %+v", text, message, resp.Error)
		}
	}
}

func TestCouchbaseGeneratedValuesAreKeptAndReused(t *testing.T) {
	tmpl := map[string]any{"name": "tls", "template": map[string]any{"stringData": map[string]any{
		"password": `{{ generatePassword 24 nil }}`,
		"key":      `{{ generatePrivateKey "EllipticP256" "PKCS#8" nil }}`,
		"cert":     `{{ generateCertificate (generatePrivateKey "RSA" "PKCS#1" 2048) "camelot" "8760h" "Server" (list "DNS:camelot.svc") nil nil }}`,
	}}}
	values := func(registry map[string]any) map[string]any {
		return map[string]any{"registry": registry, "parameters": map[string]any{}, "templates": []any{tmpl}}
	}
	first := mustCouchbase(t, values(map[string]any{}))
	data := first.Objects[0].Template.(map[string]any)["stringData"].(map[string]any)
	if len(data["password"].(string)) != 24 || !strings.Contains(data["key"].(string), "BEGIN PRIVATE KEY") ||
		!strings.Contains(data["cert"].(string), "BEGIN CERTIFICATE") {
		t.Fatalf("generated values look wrong: %v", data)
	}
	wantKeys := []string{"generated.tls.stringData.cert.0", "generated.tls.stringData.cert.1", "generated.tls.stringData.key.0", "generated.tls.stringData.password.0"}
	for _, key := range wantKeys {
		if _, ok := first.Registry[key]; !ok {
			t.Errorf("generated key %s not returned; got %v", key, first.Registry)
		}
	}
	again := mustCouchbase(t, values(first.Registry))
	if !reflect.DeepEqual(again.Objects[0].Template, first.Objects[0].Template) {
		t.Fatal("a re-render with the stored registry changed a generated value")
	}
	if len(again.Registry) != 0 {
		t.Fatalf("a re-render generated again: %v", again.Registry)
	}
}

func TestCouchbaseRegistryEntriesChainAndSnippetsRender(t *testing.T) {
	out := mustCouchbase(t, map[string]any{
		"registry":   map[string]any{"instance-id": "camelot"},
		"parameters": map[string]any{"user": "arthur"},
		"registryEntries": []any{
			map[string]any{"name": "password", "value": `{{ generatePassword 16 "ab" }}`},
			map[string]any{"name": "credentials", "value": `{{ snippet "credentials" }}`},
		},
		"snippets": map[string]any{"credentials": map[string]any{"name": "credentials", "template": map[string]any{
			"username": `{{ parameter "user" }}`, "password": `{{ registry "password" | required }}`,
		}}},
		"templates": []any{map[string]any{"name": "role", "singleton": true, "template": map[string]any{"kind": "ClusterRole"}}},
	})
	password := out.Registry["password"].(string)
	if len(password) != 16 || strings.Trim(password, "ab") != "" {
		t.Fatalf("password %q", password)
	}
	want := map[string]any{"username": "arthur", "password": password}
	if !reflect.DeepEqual(out.Registry["credentials"], want) {
		t.Fatalf("credentials %v, want %v", out.Registry["credentials"], want)
	}
	if !out.Objects[0].Singleton {
		t.Fatal("the singleton flag was lost")
	}
}

func TestCouchbaseAmplificationIsRefusedByTheOutputLimit(t *testing.T) {
	text := `{{ $a := list "xxxxxxxxxxxxxxxx" "xxxxxxxxxxxxxxxx" }}{{ $b := list $a $a $a $a }}{{ $c := list $b $b $b $b }}` +
		`{{ $d := list $c $c $c $c }}{{ $e := list $d $d $d $d }}{{ $f := list $e $e $e $e }}{{ $g := list $f $f $f $f }}{{ $g }}`
	resp := render(t, NewServer(), Request{Engine: "couchbase", Name: "provision", Limits: Limits{TimeoutMs: 2000, MaxOutputBytes: 64 << 10},
		Values: map[string]any{"registry": map[string]any{}, "templates": []any{map[string]any{"name": "t", "template": map[string]any{"v": text}}}}})
	if resp.OK || resp.Error.Kind != "limit" {
		t.Fatalf("want a limit error, got %+v", resp)
	}
}

func TestCouchbaseCheckFindsSyntaxErrors(t *testing.T) {
	resp := render(t, NewServer(), Request{Op: "check", Engine: "couchbase", Name: "provision",
		Values: map[string]any{"templates": []any{map[string]any{"name": "t", "template": map[string]any{"v": `{{ registry "a" `}}}}})
	if resp.OK || resp.Error.Kind != "parse" {
		t.Fatalf("want a parse error, got %+v", resp)
	}
}
