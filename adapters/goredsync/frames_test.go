package goredsync

import (
	"runtime"
	"slices"
	"testing"
)

//go:noinline
func framesBoth() (fast, slow []uintptr) {
	var a, b [64]uintptr
	var none [stopPCs]uintptr
	n, stopped := callerPCs(a[:], &none)
	if stopped {
		panic("callerPCs stopped at no address")
	}
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

//go:noinline
func framesStopping(stop *[stopPCs]uintptr) ([]uintptr, bool) {
	var pcs [64]uintptr
	n, stopped := callerPCs(pcs[:], stop)
	return slices.Clone(pcs[:n]), stopped
}

// callerPCs stops right after the first address that is one of stop's, and
// reports that it did.
func TestCallerPCsStop(t *testing.T) {
	var none [stopPCs]uintptr
	all, stopped := framesStopping(&none)
	if stopped || len(all) < 4 {
		t.Fatalf("callerPCs without stop addresses = %d frames, stopped %v; want 4 or more, not stopped", len(all), stopped)
	}
	// The first address is the return into the test, on another line in
	// each call.
	for _, at := range []int{1, 2, len(all) - 1} {
		stop := [stopPCs]uintptr{0, all[at]}
		got, stopped := framesStopping(&stop)
		if !stopped || len(got) != at+1 || !slices.Equal(got[1:], all[1:at+1]) {
			t.Errorf("callerPCs stopping at frame %d = %x, stopped %v; want %x, stopped", at, got, stopped, all[:at+1])
		}
		if n, stopped := stopAt(all, &stop); !stopped || n != at+1 {
			t.Errorf("stopAt(frame %d) = %d, %v; want %d, true", at, n, stopped, at+1)
		}
	}
	if n, stopped := stopAt(all, &none); stopped || n != len(all) {
		t.Errorf("stopAt(no stop addresses) = %d, %v; want %d, false", n, stopped, len(all))
	}
}
