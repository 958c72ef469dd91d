package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"text/template"

	"sigs.k8s.io/yaml"
)

var testLimits = Limits{TimeoutMs: 2000, MaxOutputBytes: 1 << 20}

func render(t testing.TB, s *Server, req Request) Response {
	t.Helper()
	if req.Op == "" {
		req.Op = "render"
	}
	if req.Engine == "" {
		req.Engine = "gotemplate"
	}
	if req.Limits == (Limits{}) {
		req.Limits = testLimits
	}
	return s.HandleWithin(&req)
}

func mustRender(t testing.TB, s *Server, req Request) string {
	t.Helper()
	resp := render(t, s, req)
	if !resp.OK {
		t.Fatalf("render failed: %+v", resp.Error)
	}
	return resp.Output
}

func TestZalandoProvisionRendersTheClusterFromThePlanContext(t *testing.T) {
	out := mustRender(t, NewServer(), Request{Name: "provision", Template: zalandoTemplate(t, "provision"), Values: zalandoValues(t, false)})
	doc := map[string]any{}
	if err := yaml.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("not YAML: %v\n%s", err, out)
	}
	meta := doc["metadata"].(map[string]any)
	if meta["name"] != "sapcp-0304b210-fcfd-11e8-a31b-b6001f10c97f" {
		t.Errorf("name = %v", meta["name"])
	}
	spec := doc["spec"].(map[string]any)
	if got := spec["volume"].(map[string]any)["size"]; got != "20Gi" {
		t.Errorf("volume = %v", got)
	}
	if got := spec["postgresql"].(map[string]any)["version"]; got != "9.6" {
		t.Errorf("version = %v", got)
	}
	users := spec["users"].(map[string]any)["main"].([]any)
	if len(users) != 2 || users[0] != "superuser" || users[1] != "createdb" {
		t.Errorf("users = %v", users)
	}
	if _, ok := spec["enableMasterLoadBalancer"]; ok {
		t.Errorf("load balancers rendered though the plan disables them")
	}
}

func TestZalandoStatusBuildsTheCredentialsFromTheSecret(t *testing.T) {
	out := mustRender(t, NewServer(), Request{Name: "status", Template: zalandoTemplate(t, "status"), Values: zalandoValues(t, true)})
	doc := map[string]any{}
	if err := yaml.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("not YAML: %v\n%s", err, out)
	}
	bind := doc["bind"].(map[string]any)
	if bind["state"] != "succeeded" {
		t.Fatalf("bind = %v", bind)
	}
	response := map[string]any{}
	if err := json.Unmarshal([]byte(bind["response"].(string)), &response); err != nil {
		t.Fatal(err)
	}
	creds := response["credentials"].(map[string]any)
	if creds["password"] != "s3cr3t-password" || creds["port"] != "5432" || creds["hostname"] != "10.96.12.34" {
		t.Errorf("credentials = %v", creds)
	}
	if !strings.HasPrefix(creds["uri"].(string), "postgres://de3dd272-fcfc-11e8-a31b-b6001f10c97f:s3cr3t-password@10.96.12.34:5432/main") {
		t.Errorf("uri = %v", creds["uri"])
	}
}

func TestZalandoStatusWithoutBindingLeavesBindInProgress(t *testing.T) {
	out := mustRender(t, NewServer(), Request{Name: "status", Template: zalandoTemplate(t, "status"), Values: zalandoValues(t, false)})
	if !strings.Contains(out, "bind:\n  state: in progress") {
		t.Errorf("bind should wait for the Secret and Service:\n%s", out)
	}
}

func TestZalandoBindAddsTheBindingUserWithoutTouchingTheInput(t *testing.T) {
	values := zalandoValues(t, true)
	out := mustRender(t, NewServer(), Request{Name: "bind", Template: zalandoTemplate(t, "bind"), Values: values})
	if !strings.Contains(out, "de3dd272-fcfc-11e8-a31b-b6001f10c97f:\n    - superuser") {
		t.Errorf("binding user missing:\n%s", out)
	}
}

func TestParseErrorCarriesTemplateAndLine(t *testing.T) {
	resp := render(t, NewServer(), Request{Name: "provision", Template: "a: 1\nb: {{ .x }\nc: 3\n"})
	if resp.OK || resp.Error.Kind != "parse" || resp.Error.Template != "provision" || resp.Error.Line != 2 {
		t.Fatalf("got %+v", resp.Error)
	}
}

func TestUnknownFunctionIsAParseErrorNamingIt(t *testing.T) {
	resp := render(t, NewServer(), Request{Name: "bind", Template: "x: 1\n\ny: {{ nosuch 1 }}\n"})
	if resp.OK || resp.Error.Line != 3 || !strings.Contains(resp.Error.Message, `function "nosuch" not defined`) {
		t.Fatalf("got %+v", resp.Error)
	}
}

func TestExecErrorCarriesLineAndColumn(t *testing.T) {
	resp := render(t, NewServer(), Request{Name: "status", Template: "a: 1\nb: {{ index .list 5 }}\n", Values: map[string]any{"list": []any{1}}})
	if resp.OK || resp.Error.Kind != "exec" || resp.Error.Line != 2 || resp.Error.Column != 6 {
		t.Fatalf("got %+v", resp.Error)
	}
	if !strings.Contains(resp.Error.Message, "index out of range") {
		t.Errorf("message = %q", resp.Error.Message)
	}
}

func TestSandboxRemovesEnvironmentAndDNS(t *testing.T) {
	for _, name := range Removed {
		resp := render(t, NewServer(), Request{Name: "provision", Template: "x: {{ " + name + ` "HOME" }}`})
		if resp.OK || resp.Error.Kind != "parse" || !strings.Contains(resp.Error.Message, `function "`+name+`" not defined`) {
			t.Errorf("%s: got %+v", name, resp.Error)
		}
	}
}

func TestServiceFabrikFunctions(t *testing.T) {
	out := mustRender(t, NewServer(), Request{Name: "t", Template: `{{ b64enc "hi" }} {{ b64dec "aGk=" }} {{ (unmarshalJSON "{\"a\":1}").a }} {{ marshalJSON (dict "b" 2) }} {{ toYaml (dict "c" 3) }} {{ (fromYaml "d: 4").d }} {{ toJson (list 1) }} {{ (fromJson "{\"e\":5}").e }}`})
	want := `aGk= hi 1 {"b":2} c: 3 4 [1] 5`
	if out != want {
		t.Errorf("got %q want %q", out, want)
	}
	resp := render(t, NewServer(), Request{Name: "t", Template: `{{ b64dec "%%%" }}`})
	if resp.OK || !strings.Contains(resp.Error.Message, "not base64") {
		t.Errorf("b64dec of garbage should fail, got %+v", resp)
	}
}

func TestOutputLimit(t *testing.T) {
	limits := Limits{TimeoutMs: 2000, MaxOutputBytes: 1000}
	resp := render(t, NewServer(), Request{Name: "p", Template: `{{ range until 500 }}xxxxxxxxxx{{ end }}`, Limits: limits})
	if resp.OK || resp.Error.Kind != "limit" || !strings.Contains(resp.Error.Message, "larger than the limit of 1000 bytes") {
		t.Fatalf("got %+v", resp.Error)
	}
	resp = render(t, NewServer(), Request{Name: "p", Template: `{{ $x := repeat 100000 "ab" }}`, Limits: limits})
	if resp.OK || resp.Error.Kind != "limit" || !strings.Contains(resp.Error.Message, "repeat would be 200000") {
		t.Fatalf("got %+v", resp.Error)
	}
}

func TestTimeLimitWhileWriting(t *testing.T) {
	limits := Limits{TimeoutMs: 50, MaxOutputBytes: 1 << 30}
	resp := render(t, NewServer(), Request{Name: "p", Template: `{{ range until 1000000 }}{{ range until 1000 }}{{ end }}x{{ end }}`, Limits: limits})
	if resp.OK || resp.Error.Kind != "limit" || !strings.Contains(resp.Error.Message, "longer than the limit") {
		t.Fatalf("got %+v", resp.Error)
	}
}

func TestWatchdogStopsASilentLoopAndAsksForARestart(t *testing.T) {
	limits := Limits{TimeoutMs: 50, MaxOutputBytes: 1 << 30}
	resp := render(t, NewServer(), Request{Name: "p", Template: `{{ range until 100000 }}{{ range until 100000 }}{{ end }}{{ end }}`, Limits: limits})
	if resp.OK || resp.Error.Kind != "limit" || !resp.Error.Fatal {
		t.Fatalf("got %+v", resp.Error)
	}
}

func TestPanicInAFunctionIsAnError(t *testing.T) {
	// strings.Repeat panics on a negative count; text/template turns that into an error.
	resp := render(t, NewServer(), Request{Name: "p", Template: "\n{{ repeat -1 \"x\" }}"})
	if resp.OK || resp.Error.Line != 2 {
		t.Fatalf("got %+v", resp.Error)
	}
}

func TestHelmChartRendersWithValuesTemplate(t *testing.T) {
	values := map[string]any{"instance": map[string]any{"metadata": map[string]any{"name": "db1"}}}
	out := mustRender(t, NewServer(), Request{
		Engine: "helm", Name: "provision", Chart: tinyChart(t),
		Template: "replicas: 3\nowner: {{ .instance.metadata.name }}\ngreeting: 'hi {{ \"{{ .Release.Name }}\" }}'\ndatabase:\n  size: 5Gi\n",
		Values:   values, Release: ReleaseInfo{Name: "in-123", Namespace: "team-a"},
	})
	docs := strings.Split(out, "\n---\n")
	if len(docs) != 3 {
		t.Fatalf("want CRD, ConfigMap and Secret, got %d documents:\n%s", len(docs), out)
	}
	for _, want := range []string{
		"name: widgets.tiny.example.com", "name: in-123-tiny", `replicas: "3"`, "namespace: team-a",
		`greeting: "hi in-123"`, "app.kubernetes.io/version: \"1.2.3\"", `owner: "db1"`, "size: 5Gi", `looked-up: "{}"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, "Thanks for installing") {
		t.Errorf("NOTES.txt rendered")
	}
}

func TestHelmRequiredFailsWithTheChartsLocation(t *testing.T) {
	resp := render(t, NewServer(), Request{Engine: "helm", Name: "provision", Chart: tinyChart(t), Release: ReleaseInfo{Name: "r", Namespace: "n"}})
	if resp.OK || resp.Error.Template != "tiny/templates/secret.yaml" || resp.Error.Line != 6 || resp.Error.Column != 12 || !strings.Contains(resp.Error.Message, "values.owner is required") {
		t.Fatalf("got %+v", resp.Error)
	}
}

func TestHelmBadArchive(t *testing.T) {
	resp := render(t, NewServer(), Request{Engine: "helm", Name: "provision", Chart: []byte("not a tgz")})
	if resp.OK || resp.Error.Kind != "chart" {
		t.Fatalf("got %+v", resp.Error)
	}
}

func TestFramedServeAnswersInOrderAndSurvivesBadJSON(t *testing.T) {
	var in bytes.Buffer
	for _, req := range []any{Request{ID: 1, Op: "ping"}, json.RawMessage(`{"id":`), Request{ID: 3, Op: "render", Engine: "gotemplate", Name: "x", Template: "{{ .a }}", Values: map[string]any{"a": "b"}}} {
		if raw, ok := req.(json.RawMessage); ok {
			var header [4]byte
			header[3] = byte(len(raw))
			in.Write(header[:])
			in.Write(raw)
			continue
		}
		if err := writeFrame(&in, req); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	if err := serve(&in, &out, NewMemory(defaultMemoryCeiling)); err != nil {
		t.Fatal(err)
	}
	var got []Response
	for out.Len() > 0 {
		frame, err := readFrame(&out)
		if err != nil {
			t.Fatal(err)
		}
		var resp Response
		if err := json.Unmarshal(frame, &resp); err != nil {
			t.Fatal(err)
		}
		got = append(got, resp)
	}
	if len(got) != 3 || got[0].Output != "pong" || got[1].OK || got[1].Error.Kind != "request" || got[2].Output != "b" {
		t.Fatalf("got %+v", got)
	}
}

// BenchmarkBareTextTemplate is the floor: the Zalando status template executed in-process by text/template
// with sprig, no protocol, no JSON, no YAML.
func BenchmarkBareTextTemplate(b *testing.B) {
	for _, action := range []string{"provision", "status"} {
		b.Run(action, func(b *testing.B) {
			tmpl := template.Must(template.New(action).Funcs(funcMap(1 << 20)).Parse(zalandoTemplate(b, action)))
			values := zalandoValues(b, true)
			var buf bytes.Buffer
			b.ResetTimer()
			for range b.N {
				buf.Reset()
				if err := tmpl.Execute(&buf, values); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestSharedValuesAreSentOnceAndCopiedPerRender(t *testing.T) {
	s := NewServer()
	tmpl := `{{ $_ := set .plan "seen" "yes" }}{{ .plan.name }} {{ .plan.n }} {{ .other }}`
	blob := json.RawMessage(`{"name":"p","n":3}`)
	first := mustRender(t, s, Request{Name: "t", Template: tmpl, Shared: map[string]string{"plan": "k1"}, Blobs: map[string]json.RawMessage{"k1": blob}, Values: map[string]any{"other": "o"}})
	again := mustRender(t, s, Request{Name: "t", Template: `{{ .plan.seen }}|{{ printf "%d" .plan.n }}`, Shared: map[string]string{"plan": "k1"}})
	if first != "p 3 o" || again != "<no value>|3" {
		t.Fatalf("got %q then %q", first, again)
	}
	resp := render(t, s, Request{Name: "t", Template: "x", Shared: map[string]string{"plan": "unknown"}})
	if resp.OK || resp.Error.Kind != "missing-blob" {
		t.Fatalf("got %+v", resp.Error)
	}
}

func TestTemplatesAreSentOnceByKey(t *testing.T) {
	s := NewServer()
	if got := mustRender(t, s, Request{Name: "t", Template: "{{ .a }}", TemplateKey: "k", Values: map[string]any{"a": 1}}); got != "1" {
		t.Fatal(got)
	}
	if got := mustRender(t, s, Request{Name: "t", TemplateKey: "k", Values: map[string]any{"a": 2}}); got != "2" {
		t.Fatal(got)
	}
	resp := render(t, s, Request{Name: "t", TemplateKey: "other"})
	if resp.OK || resp.Error.Kind != "missing-blob" {
		t.Fatalf("got %+v", resp.Error)
	}
}

func TestServeAnswersARunawayRenderFromTheWatchdogAndExits(t *testing.T) {
	s := NewServer()
	exited := make(chan struct{})
	s.exit = func() {
		close(exited)
		select {} // the process would end here; the runaway render holds serve's goroutine
	}
	var in, out bytes.Buffer
	runaway := Request{ID: 7, Op: "render", Engine: "gotemplate", Name: "p", Limits: Limits{TimeoutMs: 50, MaxOutputBytes: 1 << 30},
		Template: `{{ range until 100000 }}{{ range until 100000 }}{{ end }}{{ end }}`}
	if err := writeFrame(&in, runaway); err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.serve(&in, &out) }()
	<-exited
	frame, err := readFrame(&out)
	if err != nil {
		t.Fatal(err)
	}
	var resp Response
	if err := json.Unmarshal(frame, &resp); err != nil {
		t.Fatal(err)
	}
	if resp.ID != 7 || resp.OK || resp.Error.Kind != "limit" || !resp.Error.Fatal {
		t.Fatalf("got %+v", resp)
	}
}
