package main

// Template variables are decoded the way Kubernetes decodes unstructured objects: integers become int64 and
// only numbers with a fraction or exponent become float64. Service Fabrik's templates rely on it
// (`printf "%d" $port` with a Service's port), and encoding/json's default float64 would print
// "%!d(float64=5432)".

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// decodeRequest reads a request with its values' numbers typed as the API machinery types them.
func decodeRequest(frame []byte, req *Request) error {
	decoder := json.NewDecoder(bytes.NewReader(frame))
	decoder.UseNumber()
	if err := decoder.Decode(req); err != nil {
		return err
	}
	if req.Values != nil {
		req.Values = typedNumbers(req.Values).(map[string]any)
	}
	return nil
}

func typedNumbers(value any) any {
	switch v := value.(type) {
	case map[string]any:
		if v == nil {
			return map[string]any{}
		}
		for key, item := range v {
			v[key] = typedNumbers(item)
		}
		return v
	case []any:
		for i, item := range v {
			v[i] = typedNumbers(item)
		}
		return v
	case json.Number:
		if n, err := strconv.ParseInt(string(v), 10, 64); err == nil {
			return n
		}
		f, _ := v.Float64()
		return f
	}
	return value
}
