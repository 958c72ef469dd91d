package main

// The wire protocol between opbroker's Python renderer and this process: one request, one response, each a
// frame of a 4-byte big-endian length followed by that many bytes of JSON. Requests are answered in order,
// one at a time; the Python side serialises its callers.

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// maxFrame bounds one frame so a corrupt length cannot make either side allocate gigabytes.
const maxFrame = 64 << 20

// Request asks for one render (or a parse-only check, or a ping).
type Request struct {
	ID int64 `json:"id"`
	// Op is "render", "check" (parse only, no execution) or "ping".
	Op string `json:"op"`
	// Engine is "gotemplate", "helm" or "couchbase" (configuration templates in Values, couchbase.go).
	Engine string `json:"engine"`
	// Name names the template in errors (the action: "provision", "status", ...).
	Name string `json:"name"`
	// Template is the gotemplate text, or for helm the values template (may be empty).
	Template string `json:"template"`
	// TemplateKey names the template by a key the client chose (a hash of its text). With a key, the text
	// is sent once: a later request may leave Template empty and the parsed template is found by its key.
	TemplateKey string `json:"templateKey,omitempty"`
	// Chart is a helm chart archive (.tgz), base64 in JSON.
	Chart []byte `json:"chart,omitempty"`
	// Values are the template variables (service, plan, instance, binding, one per source).
	Values map[string]any `json:"values"`
	// Shared names variables whose value was sent before (or is in Blobs): variable name -> blob key. The
	// plan and the service are the same for many renders; sending them once saves most of the decoding.
	Shared map[string]string `json:"shared,omitempty"`
	// Blobs carries shared values this process has not seen yet: blob key -> value.
	Blobs map[string]json.RawMessage `json:"blobs,omitempty"`
	// Release names the helm release (name and namespace).
	Release ReleaseInfo `json:"release"`
	Limits  Limits      `json:"limits"`
}

// ReleaseInfo is what helm templates see as .Release.
type ReleaseInfo struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
}

// Limits mirrors rendering/limits.py: wall time and output size of one render.
type Limits struct {
	TimeoutMs      int64 `json:"timeoutMs"`
	MaxOutputBytes int64 `json:"maxOutputBytes"`
}

// Response carries the rendered text or a located error.
type Response struct {
	ID     int64        `json:"id"`
	OK     bool         `json:"ok"`
	Output string       `json:"output,omitempty"`
	Error  *RenderError `json:"error,omitempty"`
}

// readFrame reads one frame; io.EOF means the peer closed the stream between frames.
func readFrame(r io.Reader) ([]byte, error) {
	var header [4]byte
	if _, err := io.ReadFull(r, header[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint32(header[:])
	if size > maxFrame {
		return nil, fmt.Errorf("frame of %d bytes is over the limit of %d", size, maxFrame)
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(r, body); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return body, nil
}

// writeFrame writes one JSON value as a frame.
func writeFrame(w io.Writer, value any) error {
	body, err := json.Marshal(value)
	if err != nil {
		return err
	}
	var header [4]byte
	binary.BigEndian.PutUint32(header[:], uint32(len(body)))
	if _, err := w.Write(header[:]); err != nil {
		return err
	}
	_, err = w.Write(body)
	return err
}
