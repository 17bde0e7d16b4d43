package goredsync

import "runtime/debug"

// fpWalk is in frames_amd64.s.
//
//go:noescape
func fpWalk(pcs []uintptr, stop *[stopPCs]uintptr) (n int, stopped bool)

// callerPCs writes the return addresses of the frames above its caller
// into pcs, innermost first, and returns how many: as runtime.Callers(2,
// pcs) from its caller, save that wrapper frames runtime.Callers leaves out
// may be listed. It stops when pcs is full, at the bottom of the stack, or
// right after an address that is one of stop's non-zero entries (stopped
// is then true; the address is the last one written).
//
// On amd64 it follows frame pointers, some ten times faster than
// runtime.Callers; a frame pointer that cannot be a Go caller's, or a
// fault on the way (a frame that is no Go frame, as past a cgo callback),
// makes it fall back to runtime.Callers.
func callerPCs(pcs []uintptr, stop *[stopPCs]uintptr) (n int, stopped bool) {
	defer func() {
		if recover() != nil {
			n, stopped = stopAt(pcs[:callersSlow(pcs)], stop)
		}
	}()
	old := debug.SetPanicOnFault(true)
	defer debug.SetPanicOnFault(old)
	if n, stopped = fpWalk(pcs, stop); n < 0 {
		return stopAt(pcs[:callersSlow(pcs)], stop)
	}
	return n, stopped
}
