//go:build !amd64

package goredsync

// callerPCs writes the return addresses of its caller's callers into pcs,
// as runtime.Callers(2, pcs) does, and returns how many, and whether one of
// them is one of stop's non-zero entries (the last one counted then).
func callerPCs(pcs []uintptr, stop *[stopPCs]uintptr) (n int, stopped bool) {
	return stopAt(pcs[:callersSlow(pcs)], stop)
}
