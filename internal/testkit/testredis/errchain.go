package testredis

import (
	"fmt"
	"strings"
)

// ErrChain lists err and what it wraps (through Unwrap() error and
// Unwrap() []error, as errors.Is follows), with their types, one per
// indented line, for test messages.
func ErrChain(err error) string {
	var parts []string
	var walk func(error, int)
	walk = func(e error, depth int) {
		if e == nil || depth > 10 {
			return
		}
		parts = append(parts, fmt.Sprintf("%s%T(%q)", strings.Repeat("  ", depth), e, e.Error()))
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			walk(u.Unwrap(), depth+1)
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x, depth+1)
			}
		}
	}
	walk(err, 0)
	return "\n    " + strings.Join(parts, "\n    ")
}
