package main

// gotemplate: Go's text/template with the function map of funcs.go, as Service Fabrik renders it (the
// values map's missing keys render as "<no value>" and chain to nil, so `with .binding.metadata.name` works
// without a binding). Parsed templates are cached by content, so a plan's template is parsed once.

import (
	"crypto/sha256"
	"fmt"
	"sync"
	"text/template"
	"time"
)

// maxCached bounds the parsed-template cache; past it the cache starts over (plans change rarely).
const maxCached = 512

type cacheKey struct {
	name     string
	sum      [sha256.Size]byte
	maxBytes int64
}

// Templates parses and caches gotemplates.
type Templates struct {
	mu     sync.Mutex
	parsed map[cacheKey]*template.Template
	byKey  map[string]*template.Template
}

// NewTemplates makes an empty cache.
func NewTemplates() *Templates {
	return &Templates{parsed: map[cacheKey]*template.Template{}, byKey: map[string]*template.Template{}}
}

// ForRequest parses the request's template, or finds it by the client's key when the text was sent before.
func (t *Templates) ForRequest(req *Request) (*template.Template, error) {
	if req.TemplateKey == "" {
		return t.Parse(req.Name, req.Template, req.Limits.MaxOutputBytes)
	}
	key := fmt.Sprintf("%s\x00%s\x00%d", req.TemplateKey, req.Name, req.Limits.MaxOutputBytes)
	t.mu.Lock()
	parsed, ok := t.byKey[key]
	t.mu.Unlock()
	if ok {
		return parsed, nil
	}
	if req.Template == "" {
		return nil, &RenderError{Kind: "missing-blob", Message: fmt.Sprintf("template %s is not known here", req.TemplateKey)}
	}
	parsed, err := t.Parse(req.Name, req.Template, req.Limits.MaxOutputBytes)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	if len(t.byKey) >= maxCached {
		t.byKey = map[string]*template.Template{}
	}
	t.byKey[key] = parsed
	t.mu.Unlock()
	return parsed, nil
}

// Parse returns the parsed template, from the cache when the same text was parsed before.
func (t *Templates) Parse(name, text string, maxBytes int64) (*template.Template, error) {
	key := cacheKey{name: name, sum: sha256.Sum256([]byte(text)), maxBytes: maxBytes}
	t.mu.Lock()
	parsed, ok := t.parsed[key]
	t.mu.Unlock()
	if ok {
		return parsed, nil
	}
	parsed, err := template.New(name).Funcs(funcMap(maxBytes)).Parse(text)
	if err != nil {
		return nil, locate("parse", err)
	}
	t.mu.Lock()
	if len(t.parsed) >= maxCached {
		t.parsed = map[cacheKey]*template.Template{}
	}
	t.parsed[key] = parsed
	t.mu.Unlock()
	return parsed, nil
}

// outputBudget bounds the text one render writes: every writer of the render (the template's own, and in
// helm each chart file's, include's and tpl's) draws on it, so neither one writer nor many nested ones
// (include inside include, a thousand deep) can hold more than the budget, and it stops a render that
// writes past its deadline. Every {{ }} action writes, so a loop that produces output is stopped between
// two iterations; a loop that writes nothing is caught by the watchdog in main.go.
type outputBudget struct {
	maxBytes int64
	// held is what the render's writers hold now; a finished include's text is released when its caller
	// writes it, so nesting does not count the same text twice.
	held     int64
	deadline time.Time
	timeout  time.Duration
}

// heldFactor: all writers of a render together may hold this many times the output limit (the output,
// plus what nested includes hold while they run).
const heldFactor = 2

func newOutputBudget(limits Limits) *outputBudget {
	timeout := time.Duration(limits.TimeoutMs) * time.Millisecond
	return &outputBudget{maxBytes: limits.MaxOutputBytes, deadline: time.Now().Add(timeout), timeout: timeout}
}

func (b *outputBudget) writer() *boundedWriter { return &boundedWriter{budget: b} }

func (b *outputBudget) overLimit() *RenderError {
	return &RenderError{Kind: "limit", Message: fmt.Sprintf("the rendered text is larger than the limit of %d bytes", b.maxBytes)}
}

// boundedWriter is one writer of a render: at most the output limit by itself, and within the budget.
type boundedWriter struct {
	buf    []byte
	budget *outputBudget
}

func (w *boundedWriter) Write(p []byte) (int, error) {
	b := w.budget
	if int64(len(w.buf)+len(p)) > b.maxBytes || b.held+int64(len(p)) > heldFactor*b.maxBytes {
		return 0, b.overLimit()
	}
	if time.Now().After(b.deadline) {
		return 0, timeoutError(b.timeout)
	}
	if w.buf == nil {
		w.buf = make([]byte, 0, min(int64(len(p))*2+512, b.maxBytes))
	}
	w.buf = append(w.buf, p...)
	b.held += int64(len(p))
	return len(p), nil
}

// release returns the text and gives its bytes back to the budget (the caller writes them again).
func (w *boundedWriter) release() string {
	w.budget.held -= int64(len(w.buf))
	out := string(w.buf)
	w.buf = nil
	return out
}

// keep returns the text, which stays counted (it is part of the render's output).
func (w *boundedWriter) keep() string { return string(w.buf) }

func timeoutError(timeout time.Duration) *RenderError {
	return &RenderError{Kind: "limit", Message: fmt.Sprintf("rendering took longer than the limit of %gs", timeout.Seconds())}
}

// Execute runs a parsed template over values within the limits.
func Execute(tmpl *template.Template, values map[string]any, limits Limits) (string, error) {
	w := newOutputBudget(limits).writer()
	if err := tmpl.Execute(w, values); err != nil {
		return "", unwrapLimit(err)
	}
	return w.keep(), nil
}

// unwrapLimit returns a limit error raised inside the engine as itself (text/template wraps writer errors
// and function errors in its own text), else the engine's error located.
func unwrapLimit(err error) error {
	var inner *RenderError
	for e := err; e != nil; {
		if re, ok := e.(*RenderError); ok {
			inner = re
			break
		}
		u, ok := e.(interface{ Unwrap() error })
		if !ok {
			break
		}
		e = u.Unwrap()
	}
	located := locate("exec", err)
	if inner != nil && inner.Kind == "limit" {
		located.Kind = "limit"
		located.Message = inner.Message
	}
	return located
}
