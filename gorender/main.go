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
	"sync"
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
	// exit ends the process after a fatal answer was written (a runaway render cannot be stopped).
	exit func()
}

// NewServer makes a server with empty caches and the default memory policy.
func NewServer() *Server {
	return &Server{
		templates: NewTemplates(), charts: NewCharts(), blobs: NewBlobs(), memory: NewMemory(defaultMemoryCeiling),
		exit: func() {
			fmt.Fprintln(os.Stderr, "gorender:", errFatal)
			os.Exit(3)
		},
	}
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
// its heap grows past the memory watchdog's limit (the render then goes on in a goroutine of its own).
func (s *Server) HandleWithin(req *Request) Response {
	done := make(chan Response, 1)
	go s.Answer(req, func(resp Response) { done <- resp })
	return <-done
}

// Answer renders req on the calling goroutine and calls answer exactly once: with the render's response, or
// from the watchdog with a fatal limit error if the render outlives its time plus a grace period or its heap
// grows past the memory watchdog's limit (the render cannot be stopped from outside its goroutine, so it runs
// on, and Answer returns only when it ends). The watchdog runs on timers, which fire only for a slow render:
// a render that ends within the first sample (most take well under a millisecond) costs no switch to another
// goroutine or thread. Handing each request to a goroutine of its own and waiting on a ticker cost two
// thread wake-ups per request, which on a busy machine were most of a render's wall time.
func (s *Server) Answer(req *Request, answer func(Response)) {
	limit := time.Duration(req.Limits.TimeoutMs)*time.Millisecond + watchdogGrace
	if req.Limits.TimeoutMs <= 0 {
		limit = 2*time.Second + watchdogGrace
	}
	var (
		mu       sync.Mutex
		answered bool
		sampler  *time.Timer
	)
	claim := func(resp Response) {
		mu.Lock()
		defer mu.Unlock()
		if !answered {
			answered = true
			answer(resp)
		}
	}
	timer := time.AfterFunc(limit, func() {
		err := timeoutError(limit - watchdogGrace)
		err.Template, err.Fatal = req.Name, true
		claim(Response{ID: req.ID, Error: err})
	})
	var sample func()
	sample = func() {
		if heapBytes() > s.memory.Watchdog {
			if heap := liveHeapBytes(); heap > s.memory.Watchdog {
				claim(Response{ID: req.ID, Error: &RenderError{Kind: "limit", Template: req.Name, Fatal: true, Message: fmt.Sprintf(
					"rendering used more than the renderer's memory limit of %d MiB (heap at %d MiB)", s.memory.Watchdog>>20, heap>>20)}})
				return
			}
		}
		mu.Lock()
		if !answered {
			sampler.Reset(memorySampling)
		}
		mu.Unlock()
	}
	mu.Lock()
	sampler = time.AfterFunc(memorySampling, sample)
	mu.Unlock()
	resp := s.Handle(req)
	claim(resp)
	timer.Stop()
	mu.Lock()
	sampler.Stop()
	mu.Unlock()
}

func serve(in io.Reader, out io.Writer, memory Memory) error {
	server := NewServer()
	server.memory = memory
	return server.serve(in, out)
}

// serve answers the frames of in on out, one at a time, each rendered on this goroutine (see Answer).
func (server *Server) serve(in io.Reader, out io.Writer) error {
	reader := bufio.NewReaderSize(in, 1<<16)
	writer := bufio.NewWriterSize(out, 1<<16)
	for {
		frame, err := readFrame(reader)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		var written error
		send := func(resp Response) {
			if written = writeFrame(writer, resp); written == nil {
				written = writer.Flush()
			}
			if resp.Error != nil && resp.Error.Fatal {
				server.exit() // from the watchdog, while the runaway render holds this loop
			}
		}
		var req Request
		if err := decodeRequest(frame, &req); err != nil {
			send(Response{Error: &RenderError{Kind: "request", Message: fmt.Sprintf("the request is not valid JSON: %v", err)}})
		} else {
			server.Answer(&req, send)
		}
		if written != nil {
			return written
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
