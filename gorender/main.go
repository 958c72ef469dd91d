// Command gorender renders Service Fabrik's gotemplate and helm templates for opbroker.
//
// It is a long-lived subprocess of opbroker's Python renderer: requests and responses are frames of a
// 4-byte big-endian length and JSON (protocol.go) on stdin and stdout; stderr is for the process's own
// complaints. Templates get no file, network or environment access (funcs.go, helm.go), and every render is
// bounded in output size and wall time. A render that overruns its time cannot be stopped from outside its
// goroutine, so the watchdog answers the request with a limit error marked fatal and the process exits; the
// Python side starts a fresh one for the next render.
package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"time"
)

// watchdogGrace is how long past its limit a render may run before the process gives up on it.
const watchdogGrace = 250 * time.Millisecond

// Server answers requests with shared caches.
type Server struct {
	templates *Templates
	charts    *Charts
	blobs     *Blobs
}

// NewServer makes a server with empty caches.
func NewServer() *Server {
	return &Server{templates: NewTemplates(), charts: NewCharts(), blobs: NewBlobs()}
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
		if err := s.blobs.resolve(req); err != nil {
			return "", err
		}
		switch req.Engine {
		case "gotemplate":
			tmpl, err := s.templates.ForRequest(req)
			if err != nil {
				return "", err
			}
			return Execute(tmpl, req.Values, req.Limits)
		case "helm":
			return RenderChart(s.templates, s.charts, req)
		}
		return "", &RenderError{Kind: "request", Message: fmt.Sprintf("unknown engine %q (gotemplate or helm)", req.Engine)}
	}
	return "", &RenderError{Kind: "request", Message: fmt.Sprintf("unknown op %q (render, check or ping)", req.Op)}
}

// HandleWithin answers req, or a fatal limit error if the render outlives its time plus a grace period.
func (s *Server) HandleWithin(req *Request) Response {
	done := make(chan Response, 1)
	go func() { done <- s.Handle(req) }()
	limit := time.Duration(req.Limits.TimeoutMs)*time.Millisecond + watchdogGrace
	if req.Limits.TimeoutMs <= 0 {
		limit = 2*time.Second + watchdogGrace
	}
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case resp := <-done:
		return resp
	case <-timer.C:
		err := timeoutError(limit - watchdogGrace)
		err.Template, err.Fatal = req.Name, true
		return Response{ID: req.ID, Error: err}
	}
}

func serve(in io.Reader, out io.Writer) error {
	reader := bufio.NewReaderSize(in, 1<<16)
	writer := bufio.NewWriterSize(out, 1<<16)
	server := NewServer()
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

var errFatal = errors.New("a render overran its time limit and could not be stopped; exiting")

func main() {
	if len(os.Args) > 1 && os.Args[1] == "--version" {
		fmt.Println("opbroker gorender")
		return
	}
	// A soft ceiling: the garbage collector works harder as the heap nears it.
	debug.SetMemoryLimit(512 << 20)
	if err := serve(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "gorender:", err)
		os.Exit(3)
	}
}
