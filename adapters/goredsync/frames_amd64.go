package goredsync

import "runtime/debug"

// fpWalk is in frames_amd64.s.
//
//go:noescape
func fpWalk(pcs []uintptr) int

// callerPCs writes the return addresses of the frames above its caller
// into pcs, innermost first, and returns how many: as runtime.Callers(2,
// pcs) from its caller, save that wrapper frames runtime.Callers leaves out
// may be listed. It stops when pcs is full or at the bottom of the stack.
// On amd64 it follows frame pointers, some ten times faster than
// runtime.Callers; a frame pointer that cannot be a Go caller's, or a
// fault on the way (a frame that is no Go frame, as past a cgo callback),
// makes it fall back to runtime.Callers.
func callerPCs(pcs []uintptr) (n int) {
	defer func() {
		if recover() != nil {
			n = callersSlow(pcs)
		}
	}()
	old := debug.SetPanicOnFault(true)
	defer debug.SetPanicOnFault(old)
	if n = fpWalk(pcs); n < 0 {
		return callersSlow(pcs)
	}
	return n
}
