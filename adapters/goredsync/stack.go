package goredsync

import (
	"runtime"
	"strings"
)

const (
	// stackChunk is how many frames one runtime.Callers call reads; redsync's
	// frames are usually within the first dozen above the hook.
	stackChunk = 32
	// maxStackDepth bounds the walk on very deep stacks.
	maxStackDepth = 256
)

// calledFromRedsync reports whether a function of redsync (any package of
// the module) is on the calling goroutine's stack. The registry runs its hook,
// and so Classify, on the goroutine that sent the command: redsync's
// (*Mutex).acquire and its pool's (*conn).SetNX are on that stack when redsync
// acquires.
func calledFromRedsync() bool {
	var pcs [stackChunk]uintptr
	skip := 2 // runtime.Callers and calledFromRedsync
	for skip < maxStackDepth {
		n := runtime.Callers(skip, pcs[:])
		if n == 0 {
			return false
		}
		frames := runtime.CallersFrames(pcs[:n])
		for {
			f, more := frames.Next()
			if inRedsync(f.Function) {
				return true
			}
			if !more {
				break
			}
		}
		if n < len(pcs) {
			return false
		}
		skip += n
	}
	return false
}

// inRedsync reports whether fn, a function name as runtime.Frame spells it
// ("github.com/go-redsync/redsync/v4.(*Mutex).acquire"), belongs to a package
// of the redsync module.
func inRedsync(fn string) bool {
	rest, ok := strings.CutPrefix(fn, Library)
	return ok && rest != "" && (rest[0] == '.' || rest[0] == '/')
}
