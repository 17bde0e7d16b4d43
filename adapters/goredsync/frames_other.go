//go:build !amd64

package goredsync

// callerPCs writes the return addresses of its caller's callers into pcs,
// as runtime.Callers(2, pcs) does, and returns how many.
func callerPCs(pcs []uintptr) int { return callersSlow(pcs) }
