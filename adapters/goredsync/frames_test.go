package goredsync

import (
	"runtime"
	"slices"
	"testing"
)

//go:noinline
func framesBoth() (fast, slow []uintptr) {
	var a, b [64]uintptr
	n := callerPCs(a[:])
	m := runtime.Callers(2, b[:])
	return slices.Clone(a[:n]), slices.Clone(b[:m])
}

// callerPCs gives the frames runtime.Callers gives, on the test's goroutine
// and on a goroutine of its own (whose stack ends at its start).
func TestCallerPCs(t *testing.T) {
	check := func(where string, fast, slow []uintptr) {
		t.Helper()
		// The return address into framesBoth's caller differs (the two calls
		// are on different lines), and wrapper frames that runtime.Callers
		// leaves out may be listed.
		if len(fast) < 2 || len(fast) < len(slow) || fast[len(fast)-1] != slow[len(slow)-1] || !subsequence(slow[1:], fast[1:]) {
			t.Errorf("%s: callerPCs = %d frames %x, runtime.Callers = %d frames %x", where, len(fast), fast, len(slow), slow)
		}
	}
	fast, slow := framesBoth()
	check("test goroutine", fast, slow)
	done := make(chan struct{})
	go func() {
		defer close(done)
		fast, slow := framesBoth()
		check("new goroutine", fast, slow)
	}()
	<-done
}

// subsequence reports whether every element of a appears in b, in order.
func subsequence(a, b []uintptr) bool {
	i := 0
	for _, x := range b {
		if i < len(a) && a[i] == x {
			i++
		}
	}
	return i == len(a)
}
