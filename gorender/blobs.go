package main

// Shared values: a request may name a variable by the key of a value sent earlier instead of sending it
// again. A render whose template may change what it is given (`set` on a map, see MayChange) gets its own
// deep copy, because one render must never see another's changes; any other render reads the stored value
// itself (copying the plan took an eighth of a render's time, and no function left to such a template can
// write into it).

import (
	"fmt"
	"sync"
)

// maxBlobs bounds the shared-value store; past it the store starts over (the client resends on demand).
const maxBlobs = 128

// Blobs holds decoded shared values by key.
type Blobs struct {
	mu     sync.Mutex
	values map[string]any
	// copies counts the deep copies made (for tests: a template that cannot change its values gets none).
	copies int
}

// NewBlobs makes an empty store.
func NewBlobs() *Blobs { return &Blobs{values: map[string]any{}} }

// resolve stores the request's new blobs and puts every shared value into its values: a private copy when
// private is true (the template may change it), else the stored value itself.
func (b *Blobs) resolve(req *Request, private bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for key, raw := range req.Blobs {
		value, err := decodeValue(raw)
		if err != nil {
			return &RenderError{Kind: "request", Message: fmt.Sprintf("shared value %s is not JSON: %v", key, err)}
		}
		if len(b.values) >= maxBlobs {
			b.values = map[string]any{}
		}
		b.values[key] = value
	}
	if len(req.Shared) > 0 && req.Values == nil {
		req.Values = map[string]any{}
	}
	for name, key := range req.Shared {
		value, ok := b.values[key]
		if !ok {
			return &RenderError{Kind: "missing-blob", Message: fmt.Sprintf("shared value %s is not known here", key)}
		}
		if private {
			value = deepCopy(value)
			b.copies++
		}
		req.Values[name] = value
	}
	return nil
}

func deepCopy(value any) any {
	switch v := value.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for key, item := range v {
			out[key] = deepCopy(item)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, item := range v {
			out[i] = deepCopy(item)
		}
		return out
	}
	return value
}
