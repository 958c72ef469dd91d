package main

// How large a value is when printed: the estimate every bounded function (bounds.go) makes before it
// builds anything. text/template prints a value with fmt, which formats the whole value into one buffer
// before the output writer sees a byte, and toJson/toYaml/toToml do the same; so a value that would print
// as gigabytes (a list holding itself many times over, a dict set into itself) must never be built, and its
// size cannot be learned by printing it. The estimate is an upper bound for fmt's %v, JSON and YAML: each
// string counts its bytes plus what JSON escaping adds, each container element the indentation YAML gives
// it at its depth. The walk stops as soon as the total passes the budget, so it costs at most the budget.

import (
	"fmt"
	"reflect"
	"strconv"
)

// maxDepth bounds how deeply a value may nest: deeper values are refused rather than walked (fmt and the
// encoders recurse without a bound of their own).
const maxDepth = 1000

// scalarSize is what a number, a boolean or nil prints as, at most (a float64 in %v takes up to 24 bytes).
const scalarSize = 24

// tooLarge reports that a value's printed size passed the budget; the walk stops there.
type tooLarge struct {
	reason string
}

func (e *tooLarge) Error() string { return e.reason }

// sizer walks values, counting their printed size against a budget.
type sizer struct {
	budget int64
	total  int64
	// onPath holds the maps and slices between the root and the current element: meeting one again is a
	// cycle, which would make fmt and the encoders recurse until the stack runs out.
	onPath map[uintptr]bool
	// escapes counts what JSON escaping adds to strings (for the encoders; fmt prints strings as they are).
	escapes bool
}

// printedSize estimates how many bytes v prints as; an error if that is over budget, nests deeper than
// maxDepth or contains itself.
func printedSize(v any, budget int64) (int64, error) {
	s := &sizer{budget: budget}
	if err := s.walk(reflect.ValueOf(v), 0); err != nil {
		return s.total, err
	}
	return s.total, nil
}

// encodedSize is printedSize with JSON's escaping counted: what toJson, toYaml or toToml would write.
func encodedSize(v any, budget int64) (int64, error) {
	s := &sizer{budget: budget, escapes: true}
	err := s.walk(reflect.ValueOf(v), 0)
	return s.total, err
}

// printedSizes is printedSize over several values together.
func printedSizes(values []any, budget int64) (int64, error) {
	s := &sizer{budget: budget}
	for _, v := range values {
		if err := s.walk(reflect.ValueOf(v), 0); err != nil {
			return s.total, err
		}
	}
	return s.total, nil
}

func (s *sizer) add(n int64) error {
	s.total += n
	if s.total > s.budget {
		return &tooLarge{reason: "over budget"}
	}
	return nil
}

func (s *sizer) walk(v reflect.Value, depth int) error {
	if depth > maxDepth {
		return &tooLarge{reason: fmt.Sprintf("nested deeper than %d levels", maxDepth)}
	}
	if !v.IsValid() {
		return s.add(scalarSize)
	}
	switch v.Kind() {
	case reflect.String:
		if !s.escapes {
			return s.add(int64(v.Len()) + 2)
		}
		return s.add(stringSize(v.String()))
	case reflect.Interface, reflect.Pointer:
		if v.IsNil() {
			return s.add(scalarSize)
		}
		return s.walk(v.Elem(), depth)
	case reflect.Map:
		return s.container(v, depth, func() error {
			iter := v.MapRange()
			for iter.Next() {
				if err := s.add(elementCost(depth)); err != nil {
					return err
				}
				if err := s.walk(iter.Key(), depth+1); err != nil {
					return err
				}
				if err := s.walk(iter.Value(), depth+1); err != nil {
					return err
				}
			}
			return nil
		})
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Uint8 {
			return s.add(int64(v.Len())*4/3 + 4) // []byte prints as base64 in JSON
		}
		return s.container(v, depth, func() error {
			for i := 0; i < v.Len(); i++ {
				if err := s.add(elementCost(depth)); err != nil {
					return err
				}
				if err := s.walk(v.Index(i), depth+1); err != nil {
					return err
				}
			}
			return nil
		})
	case reflect.Struct:
		if err := s.add(2); err != nil {
			return err
		}
		for i := 0; i < v.NumField(); i++ {
			if err := s.add(elementCost(depth) + int64(len(v.Type().Field(i).Name))); err != nil {
				return err
			}
			if err := s.walk(v.Field(i), depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	return s.add(scalarSize)
}

// container walks a map or slice, refusing one that is already being walked (a cycle).
func (s *sizer) container(v reflect.Value, depth int, body func() error) error {
	if err := s.add(2); err != nil {
		return err
	}
	if v.Kind() == reflect.Array || (v.Kind() == reflect.Slice && v.Len() == 0) || v.Pointer() == 0 {
		return body()
	}
	ptr := v.Pointer()
	if s.onPath == nil {
		s.onPath = map[uintptr]bool{}
	}
	if s.onPath[ptr] {
		return &tooLarge{reason: "it contains itself"}
	}
	s.onPath[ptr] = true
	err := body()
	delete(s.onPath, ptr)
	return err
}

// elementCost is what one list item or map entry adds besides its content: YAML's indentation at its
// depth, a "- " or ": ", quotes and separators.
func elementCost(depth int) int64 { return 2*int64(depth) + 6 }

// stringSize is a string's length plus what JSON escaping adds (a control character, quote, backslash or
// one of <>& becomes up to six bytes), plus its quotes.
func stringSize(s string) int64 {
	size := int64(len(s)) + 2
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20, c == '"', c == '\\', c == '<', c == '>', c == '&':
			size += 5
		}
	}
	return size
}

// describe names a size for an error message.
func describe(size int64) string { return strconv.FormatInt(size, 10) }
