// Command gorender renders Service Fabrik's gotemplate and helm templates for opbroker.
//
// It is a long-lived subprocess of opbroker's Python renderer: requests and responses are frames of a
// 4-byte big-endian length and JSON (protocol.go) on stdin and stdout; stderr is for the process's own
// complaints, never for values (logs.go). Templates get no file, network or environment access (funcs.go,
// helm.go), and every render is bounded in output size, in the size of every value a function builds
// (bounds.go), in wall time and in memory. A render that overruns its time or its memory cannot be stopped
// from outside its goroutine, so the watchdog answers the request with a limit error marked fatal and the
// process exits; the Python side starts a fresh one for the next render. The Python side also caps the
// process's address space, which ends it should a single step outgrow the watchdog's sampling.
package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"time"
)

// watchdogGrace is how long past its limit a render may run before the process gives up on it.
const watchdogGrace = 250 * time.Millisecond

// memorySampling is how often the watchdog reads the heap's size while a render runs. Every function a
// template calls is bounded to the output limit (1 MiB by default), so between two samples a render can
// grow the heap by what it allocates in this time, which the ceiling's headroom (see Memory) absorbs.
const memorySampling = 2 * time.Millisecond

// defaultMemoryCeiling is used when no --memory-ceiling is given (tests, a manual run).
const defaultMemoryCeiling = 256 << 20

// Memory is the process's memory policy, derived from its ceiling (the address space the Python side lets
// it add to what it maps at start): the garbage collector aims to stay under half of it (a soft limit: it
// collects harder as the heap nears it), the watchdog fails a render whose heap passes 5/8 of it (the rest
// is headroom for what a render allocates between two samples, and for the runtime itself), and a
// goroutine's stack may take 1/8 of it (Go's default is 1 GB, which a recursive template could fill).
type Memory struct {
	Ceiling   int64
	SoftLimit int64
	Watchdog  int64
	MaxStack  int64
}

// NewMemory derives the policy from a ceiling in bytes.
func NewMemory(ceiling int64) Memory {
	return Memory{Ceiling: ceiling, SoftLimit: ceiling / 2, Watchdog: ceiling / 8 * 5, MaxStack: ceiling / 8}
}

// Apply sets the runtime's soft limit and stack limit.
func (m Memory) Apply() {
	debug.SetMemoryLimit(m.SoftLimit)
	debug.SetMaxStack(int(m.MaxStack))
}

var heapSample = []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}

// heapBytes is the size of the heap's objects, live or not yet swept.
func heapBytes() int64 {
	metrics.Read(heapSample)
	return int64(heapSample[0].Value.Uint64())
}

// liveHeapBytes is the heap's size after a collection: garbage is not held against a render.
func liveHeapBytes() int64 {
	runtime.GC()
	return heapBytes()
}

// Server answers requests with shared caches.
type Server struct {
	templates *Templates
	charts    *Charts
	blobs     *Blobs
	memory    Memory
	// idle is the goroutine that renders, waiting for the next request (nil until the first, and after a
	// render it was given up on). One long-lived goroutine keeps the stack a render grew: a fresh goroutine
	// per request started from 8 KiB and copied its stack as it grew, a tenth of a render's time.
	idle *renderer
}

// renderer is a goroutine answering requests one at a time.
type renderer struct {
	requests  chan *Request
	responses chan Response
}

func (s *Server) renderer() *renderer {
	if r := s.idle; r != nil {
		s.idle = nil
		return r
	}
	r := &renderer{requests: make(chan *Request), responses: make(chan Response, 1)}
	go func() {
		for req := range r.requests {
			r.responses <- s.Handle(req)
		}
	}()
	return r
}

// NewServer makes a server with empty caches and the default memory policy.
func NewServer() *Server {
	return &Server{templates: NewTemplates(), charts: NewCharts(), blobs: NewBlobs(), memory: NewMemory(defaultMemoryCeiling)}
}

// Handle answers one request; it never panics (a panic inside an engine becomes an error).
func (s *Server) Handle(req *Request) (resp Response) {
	resp.ID = req.ID
	defer func() {
		if r := recover(); r != nil {
			resp.OK, resp.Output = false, ""
			resp.Error = &RenderError{Kind: "exec", Template: req.Name, Message: fmt.Sprintf("the template engine panicked: %v", r)}
		}
	}()
	if req.Limits.MaxOutputBytes <= 0 {
		req.Limits.MaxOutputBytes = 1 << 20
	}
	if req.Limits.TimeoutMs <= 0 {
		req.Limits.TimeoutMs = 2000
	}
	output, err := s.run(req)
	if err != nil {
		if re, ok := err.(*RenderError); ok && re.Kind == "missing-blob" {
			resp.Error = re
			return resp
		}
		located := locate("exec", err)
		if located.Template == "" {
			located.Template = req.Name
		}
		resp.Error = located
		return resp
	}
	resp.OK, resp.Output = true, output
	return resp
}

func (s *Server) run(req *Request) (string, error) {
	switch req.Op {
	case "ping":
		return "pong", nil
	case "check":
		if req.Engine == "couchbase" {
			return "", CheckCouchbase(req)
		}
		if req.Engine == "helm" {
			if _, err := s.charts.Load(req.Chart); err != nil && len(req.Chart) > 0 {
				return "", err
			}
		}
		if req.Engine == "helm" && req.Template == "" {
			return "", nil
		}
		_, err := s.templates.Parse(req.Name, req.Template, req.Limits.MaxOutputBytes)
		return "", err
	case "render":
		switch req.Engine {
		case "gotemplate":
			tmpl, err := s.templates.ForRequest(req)
			if err != nil {
				return "", err
			}
			if err := s.blobs.resolve(req, s.templates.MayChange(tmpl)); err != nil {
				return "", err
			}
			return Execute(tmpl, req.Values, req.Limits)
		case "helm":
			// a chart's templates are parsed per render by helm's engine: always a private copy
			if err := s.blobs.resolve(req, true); err != nil {
				return "", err
			}
			return RenderChart(s.templates, s.charts, req)
		case "couchbase":
			if err := s.blobs.resolve(req, true); err != nil {
				return "", err
			}
			return RenderCouchbase(req)
		}
		return "", &RenderError{Kind: "request", Message: fmt.Sprintf("unknown engine %q (gotemplate, helm or couchbase)", req.Engine)}
	}
	return "", &RenderError{Kind: "request", Message: fmt.Sprintf("unknown op %q (render, check or ping)", req.Op)}
}

// HandleWithin answers req, or a fatal limit error if the render outlives its time plus a grace period or
// its heap grows past the memory watchdog's limit.
func (s *Server) HandleWithin(req *Request) Response {
	worker := s.renderer()
	worker.requests <- req
	limit := time.Duration(req.Limits.TimeoutMs)*time.Millisecond + watchdogGrace
	if req.Limits.TimeoutMs <= 0 {
		limit = 2*time.Second + watchdogGrace
	}
	timer := time.NewTimer(limit)
	defer timer.Stop()
	sampler := time.NewTicker(memorySampling)
	defer sampler.Stop()
	for {
		select {
		case resp := <-worker.responses:
			s.idle = worker
			return resp
		case <-sampler.C:
			if heapBytes() <= s.memory.Watchdog {
				continue
			}
			if heap := liveHeapBytes(); heap > s.memory.Watchdog {
				err := &RenderError{Kind: "limit", Template: req.Name, Fatal: true, Message: fmt.Sprintf(
					"rendering used more than the renderer's memory limit of %d MiB (heap at %d MiB)", s.memory.Watchdog>>20, heap>>20)}
				return Response{ID: req.ID, Error: err}
			}
		case <-timer.C:
			err := timeoutError(limit - watchdogGrace)
			err.Template, err.Fatal = req.Name, true
			return Response{ID: req.ID, Error: err}
		}
	}
}

func serve(in io.Reader, out io.Writer, memory Memory) error {
	reader := bufio.NewReaderSize(in, 1<<16)
	writer := bufio.NewWriterSize(out, 1<<16)
	server := NewServer()
	server.memory = memory
	for {
		frame, err := readFrame(reader)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		var req Request
		var resp Response
		if err := decodeRequest(frame, &req); err != nil {
			resp = Response{Error: &RenderError{Kind: "request", Message: fmt.Sprintf("the request is not valid JSON: %v", err)}}
		} else {
			resp = server.HandleWithin(&req)
		}
		if err := writeFrame(writer, resp); err != nil {
			return err
		}
		if err := writer.Flush(); err != nil {
			return err
		}
		if resp.Error != nil && resp.Error.Fatal {
			return errFatal
		}
	}
}

var errFatal = errors.New("a render overran its time or memory limit and could not be stopped; exiting")

// memoryCeiling reads `--memory-ceiling BYTES` from the arguments (the default when absent).
func memoryCeiling(args []string) (int64, error) {
	for i, arg := range args {
		if arg == "--memory-ceiling" && i+1 < len(args) {
			n, err := strconv.ParseInt(args[i+1], 10, 64)
			if err != nil || n < 32<<20 {
				return 0, fmt.Errorf("--memory-ceiling needs a number of bytes of at least 32 MiB, not %q", args[i+1])
			}
			return n, nil
		}
	}
	return defaultMemoryCeiling, nil
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "--version" {
		fmt.Println("opbroker gorender")
		return
	}
	ceiling, err := memoryCeiling(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "gorender:", err)
		os.Exit(2)
	}
	memory := NewMemory(ceiling)
	memory.Apply()
	// helm's chartutil logs warnings through the standard logger, with values in them.
	log.SetFlags(0)
	log.SetOutput(withoutValues{out: os.Stderr})
	if err := serve(os.Stdin, os.Stdout, memory); err != nil {
		fmt.Fprintln(os.Stderr, "gorender:", err)
		os.Exit(3)
	}
}
