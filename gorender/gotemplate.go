package main

// gotemplate: Go's text/template with the function map of funcs.go, as Service Fabrik renders it (the
// values map's missing keys render as "<no value>" and chain to nil, so `with .binding.metadata.name` works
// without a binding). Parsed templates are cached by content, so a plan's template is parsed once.

import (
	"crypto/sha256"
	"fmt"
	"sync"
	"text/template"
	"text/template/parse"
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
	// changes remembers MayChange's verdict per parsed template (bounded like the caches above).
	changes map[*template.Template]bool
}

// NewTemplates makes an empty cache.
func NewTemplates() *Templates {
	return &Templates{
		parsed:  map[cacheKey]*template.Template{},
		byKey:   map[string]*template.Template{},
		changes: map[*template.Template]bool{},
	}
}

// changingFuncs are the functions of the gotemplate function map that write into a map they are given:
// sprig's set and unset write one entry of their first argument; the merges write into their first argument
// at any depth. Every other function builds new values, and text/template itself only reads its data
// (`$x = ...` rebinds a variable, it writes nothing).
var changingFuncs = map[string]bool{
	"set": true, "unset": true, "merge": true, "mergeOverwrite": true, "mustMerge": true, "mustMergeOverwrite": true,
}

// MayChange tells whether executing tmpl may change the values it is given. It may not when every call of a
// changing function is a set or unset whose first argument is a variable that every declaration and
// assignment of that name (in any template of the set) binds to a new `dict`: such a call writes only into
// a map the render made itself. (A map inside it may be the caller's, but set and unset write the top level
// only; a merge writes at any depth, so any merge may change them.) A render of a template that cannot
// change its values needs no private copy of shared values.
func (t *Templates) MayChange(tmpl *template.Template) bool {
	t.mu.Lock()
	verdict, ok := t.changes[tmpl]
	t.mu.Unlock()
	if ok {
		return verdict
	}
	walk := changeWalk{fresh: map[string]bool{}}
	for _, each := range tmpl.Templates() {
		if each.Tree != nil && each.Root != nil {
			walk.node(each.Root)
		}
	}
	verdict = walk.changing
	for _, name := range walk.setTargets {
		if !walk.fresh[name] {
			verdict = true
		}
	}
	t.mu.Lock()
	if len(t.changes) >= maxCached {
		t.changes = map[*template.Template]bool{}
	}
	t.changes[tmpl] = verdict
	t.mu.Unlock()
	return verdict
}

// changeWalk gathers what MayChange judges from a template's parse trees.
type changeWalk struct {
	// changing: a changing function is used other than as set/unset on a plain variable.
	changing bool
	// fresh: per variable name, whether every declaration and assignment seen binds a new dict.
	fresh map[string]bool
	// setTargets: the variables set and unset write into.
	setTargets []string
}

func (w *changeWalk) node(node parse.Node) {
	switch n := node.(type) {
	case *parse.ListNode:
		if n != nil {
			for _, item := range n.Nodes {
				w.node(item)
			}
		}
	case *parse.ActionNode:
		w.pipe(n.Pipe, false)
	case *parse.IfNode:
		w.branch(&n.BranchNode, false)
	case *parse.RangeNode:
		w.branch(&n.BranchNode, true)
	case *parse.WithNode:
		w.branch(&n.BranchNode, false)
	case *parse.TemplateNode:
		w.pipe(n.Pipe, false)
	case *parse.PipeNode:
		w.pipe(n, false)
	case *parse.ChainNode:
		w.node(n.Node)
	case *parse.IdentifierNode:
		// a changing function anywhere but at the head of a command (where command() looks) is not judged
		if changingFuncs[n.Ident] {
			w.changing = true
		}
	}
}

func (w *changeWalk) branch(n *parse.BranchNode, ranging bool) {
	w.pipe(n.Pipe, ranging)
	w.node(n.List)
	w.node(n.ElseList)
}

// pipe judges a pipeline; ranging: its variables are bound to the items of what it yields, not to it.
func (w *changeWalk) pipe(p *parse.PipeNode, ranging bool) {
	if p == nil {
		return
	}
	fresh := !ranging && len(p.Cmds) == 1 && len(p.Cmds[0].Args) > 0 && isIdent(p.Cmds[0].Args[0], "dict")
	for _, v := range p.Decl {
		if len(v.Ident) != 1 {
			w.changing = true
			continue
		}
		previous, seen := w.fresh[v.Ident[0]]
		w.fresh[v.Ident[0]] = fresh && (!seen || previous)
	}
	for _, cmd := range p.Cmds {
		w.command(cmd)
	}
}

func (w *changeWalk) command(cmd *parse.CommandNode) {
	args := cmd.Args
	if len(args) > 0 {
		if ident, ok := args[0].(*parse.IdentifierNode); ok && changingFuncs[ident.Ident] {
			target, plain := variable(args[1:])
			if (ident.Ident == "set" || ident.Ident == "unset") && plain {
				w.setTargets = append(w.setTargets, target)
			} else {
				w.changing = true
			}
			args = args[1:]
		}
	}
	for _, arg := range args {
		w.node(arg)
	}
}

// variable is the name of a plain variable (`$m`, no field after it) heading args.
func variable(args []parse.Node) (string, bool) {
	if len(args) == 0 {
		return "", false
	}
	v, ok := args[0].(*parse.VariableNode)
	if !ok || len(v.Ident) != 1 {
		return "", false
	}
	return v.Ident[0], true
}

func isIdent(node parse.Node, name string) bool {
	ident, ok := node.(*parse.IdentifierNode)
	return ok && ident.Ident == name
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
