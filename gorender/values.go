package main

// Template variables are decoded the way Kubernetes decodes unstructured objects: integers become int64 and
// only numbers with a fraction or exponent (or past int64) become float64. Service Fabrik's templates rely on
// it (`printf "%d" $port` with a Service's port), and encoding/json's default float64 would print
// "%!d(float64=5432)". sigs.k8s.io/json is the API machinery's own decoder for this: it types the numbers
// while it decodes, where encoding/json with UseNumber needed a second pass over every value (and a string
// per number), a fifth of a request's decoding.

import (
	kjson "sigs.k8s.io/json"
)

// decodeRequest reads a request with its values' numbers typed as the API machinery types them. Field names
// match the protocol's exactly (case-sensitively), as the Python side writes them.
func decodeRequest(frame []byte, req *Request) error {
	if err := kjson.UnmarshalCaseSensitivePreserveInts(frame, req); err != nil {
		return err
	}
	return nil
}

// decodeValue reads one JSON value with its numbers typed as decodeRequest types them.
func decodeValue(raw []byte) (any, error) {
	var value any
	err := kjson.UnmarshalCaseSensitivePreserveInts(raw, &value)
	return value, err
}
