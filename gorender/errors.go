package main

// Errors leave this process as fields, not prose: the Python side names plan, action and line from them.
// text/template reports "template: NAME:LINE:COL: executing ..." for execution errors and
// "template: NAME:LINE: ..." for parse errors; helm wraps the same text or says "parse error at (NAME:LINE)".

import (
	"regexp"
	"strconv"
	"strings"
)

// RenderError is a failed render, located as precisely as the engine allows.
type RenderError struct {
	// Kind is "parse", "exec", "limit", "chart", "values" or "request".
	Kind     string `json:"kind"`
	Message  string `json:"message"`
	Template string `json:"template,omitempty"`
	Line     int    `json:"line,omitempty"`
	Column   int    `json:"column,omitempty"`
	// Fatal asks the client to restart this process (a runaway render could not be stopped).
	Fatal bool `json:"fatal,omitempty"`
}

func (e *RenderError) Error() string { return e.Message }

var (
	templateLocation = regexp.MustCompile(`template: ([^:\s]+):(\d+)(?::(\d+))?: (.*)`)
	parseLocation    = regexp.MustCompile(`(?:parse|execution) error at \(([^)]*?):(\d+)(?::(\d+))?\): (.*)`)
	executingPrefix  = regexp.MustCompile(`^executing "[^"]*" at <([^>]*)>: (.*)`)
)

// locate turns an engine error into a RenderError. The innermost location wins: helm nests
// "template: a:1:2: executing ... error calling include: template: b:3:4: ..." and the last one is where the
// problem is.
func locate(kind string, err error) *RenderError {
	if located, ok := err.(*RenderError); ok {
		return located
	}
	message := err.Error()
	out := &RenderError{Kind: kind, Message: message}
	if m := parseLocation.FindStringSubmatch(message); m != nil {
		out.Template = m[1]
		out.Line, _ = strconv.Atoi(m[2])
		out.Column, _ = strconv.Atoi(m[3])
		out.Message = tidy(m[4])
		return out
	}
	if found := templateLocation.FindAllStringSubmatchIndex(message, -1); len(found) > 0 {
		last := found[len(found)-1]
		out.Template = message[last[2]:last[3]]
		out.Line, _ = strconv.Atoi(message[last[4]:last[5]])
		if last[6] >= 0 {
			out.Column, _ = strconv.Atoi(message[last[6]:last[7]])
		}
		out.Message = tidy(message[last[8]:last[9]])
	}
	return out
}

// tidy shortens `executing "x" at <.a.b>: error calling f: cause` to `at <.a.b>: error calling f: cause`.
func tidy(message string) string {
	if m := executingPrefix.FindStringSubmatch(message); m != nil {
		return "at <" + m[1] + ">: " + m[2]
	}
	return strings.TrimSpace(message)
}
