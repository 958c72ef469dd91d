package main

// What this process writes to stderr is read by the Python side and logged, so it must not carry values:
// helm's chartutil logs a warning per values key it cannot merge, printing the value ("warning: destination
// for password is a table. Ignoring non-table value (s3cr3t)"). Every line of the standard logger is cut to
// its first words, which in helm's warnings are the fixed text that says what happened.

import (
	"bytes"
	"fmt"
	"io"
)

// loggedWords is how many words of a log line are kept.
const loggedWords = 3

// withoutValues writes each log line as its first words and how long it was.
type withoutValues struct {
	out io.Writer
}

func (w withoutValues) Write(p []byte) (int, error) {
	for _, line := range bytes.Split(bytes.TrimRight(p, "\n"), []byte("\n")) {
		if _, err := fmt.Fprintf(w.out, "gorender: log: %s ... (%d bytes withheld: they may hold values)\n", firstWords(line, loggedWords), len(line)); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// firstWords is line's first n space-separated words, each cut to 40 bytes.
func firstWords(line []byte, n int) []byte {
	words := bytes.Fields(line)
	if len(words) > n {
		words = words[:n]
	}
	for i, word := range words {
		if len(word) > 40 {
			words[i] = word[:40]
		}
	}
	return bytes.Join(words, []byte(" "))
}
