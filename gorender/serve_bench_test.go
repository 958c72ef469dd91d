package main

// BenchmarkServe measures one request as the Python side sends it after the first: the template and the
// shared values (plan, service) named by key, the per-render values inline; framing, decoding, the render,
// the answer's encoding. Beside BenchmarkBareTextTemplate it shows what the protocol costs per render.

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"testing"
)

func frame(b testing.TB, value any) []byte {
	body, err := json.Marshal(value)
	if err != nil {
		b.Fatal(err)
	}
	out := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
	return append(out, body...)
}

func BenchmarkServe(b *testing.B) {
	for _, action := range []string{"provision", "status"} {
		b.Run(action, func(b *testing.B) {
			values := zalandoValues(b, action == "status")
			plan, service := values["plan"], values["service"]
			delete(values, "plan")
			delete(values, "service")
			planJSON, _ := json.Marshal(plan)
			serviceJSON, _ := json.Marshal(service)
			limits := Limits{TimeoutMs: 2000, MaxOutputBytes: 1 << 20}
			shared := map[string]string{"plan": "p", "service": "s"}
			first := frame(b, Request{ID: 1, Op: "render", Engine: "gotemplate", Name: action, Template: zalandoTemplate(b, action),
				TemplateKey: "t", Values: values, Shared: shared, Limits: limits,
				Blobs: map[string]json.RawMessage{"p": planJSON, "s": serviceJSON}})
			next := frame(b, Request{ID: 2, Op: "render", Engine: "gotemplate", Name: action, TemplateKey: "t", Values: values, Shared: shared, Limits: limits})
			input := bytes.NewBuffer(nil)
			input.Write(first)
			for range b.N {
				input.Write(next)
			}
			var out countingWriter
			b.ResetTimer()
			if err := serve(input, &out, NewMemory(defaultMemoryCeiling)); err != nil {
				b.Fatal(err)
			}
			if out.failed {
				b.Fatal("a render failed")
			}
		})
	}
}

// countingWriter discards the answers, noting whether one was an error.
type countingWriter struct {
	failed bool
}

func (w *countingWriter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(`"error":`)) {
		w.failed = true
	}
	return len(p), nil
}
