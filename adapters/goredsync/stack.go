package goredsync

import (
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// Telling redsync's SET NX from the application's own takes the call stack:
// both send the same command through the same client. Two things keep that
// cheap.
//
// First, redsync acquires under a context with a deadline (Mutex.lockContext
// wraps it in context.WithTimeout, in every supported release; the probe
// fails if a release stops doing so, since its Lock step must then classify
// as an obtain). A SET NX sent under a context without a deadline is the
// application's, with no walk at all: Classify checks Command.Deadline.
//
// Second, a return address found in a function of redsync (inlined ones
// included) on one stack is remembered (redsyncPCs, a few of them: redsync
// calls go-redis's SetNX from one place), and the walk of a later stack
// stops as soon as it meets one: redsync's own SET NX costs a walk of the
// frames up to redsync's and nothing more.
//
// Third, the verdict for a stack is remembered by the return addresses of
// its innermost frames (its window), so that the same call site costs one
// walk and a map lookup after the first time. A window's verdict
// is remembered only when the window decides it: it holds a frame of
// redsync; or it holds the whole stack; or it holds enough frames beyond
// the outermost go-redis frame (the caller of go-redis's SetNX and a few
// more) to be sure no redsync frame follows. redsync's go-redis pool calls
// the client's SetNX from (*conn).SetNX, called from (*Mutex).acquire, so a
// redsync frame is always within a couple of frames of go-redis's own.

const (
	// windowFrames is how many return addresses make a stack's window: the
	// frames of Classify, the registry's hook and go-redis (with a few more
	// hooks of the application's), and frames beyond them.
	windowFrames = 16
	// beyondGoRedis is how many frames beyond the outermost go-redis frame
	// a window must hold to decide that redsync did not send the command.
	beyondGoRedis = 4
	// maxVerdicts bounds the remembered windows; beyond it, new windows are
	// walked each time.
	maxVerdicts = 4096
	// stackChunk and maxStackDepth bound the full walk of a stack that
	// its window does not decide.
	stackChunk    = 32
	maxStackDepth = 256
	goRedisPrefix = "github.com/redis/go-redis/v9."
	// stopPCs is how many return addresses in redsync's functions are
	// remembered.
	stopPCs = 4
)

// window is the return addresses of a stack's innermost frames.
type window struct {
	pcs [windowFrames]uintptr
	n   int
}

var (
	verdictsMu sync.Mutex                          // serialises changes to verdicts and redsyncPCs
	verdicts   atomic.Pointer[map[uint64]*verdict] // read without a lock
	// redsyncPCs are return addresses found in a function of redsync, zero
	// where none is kept yet. Entries are set once, with atomic stores;
	// callerPCs reads them as it walks.
	redsyncPCs [stopPCs]uintptr
)

type verdict struct {
	w       window
	redsync bool
}

// calledFromRedsync reports whether a function of redsync (any package of
// the module) is on the calling goroutine's stack. The registry runs its hook,
// and so Classify, on the goroutine that sent the command.
//
// Its frame is kept small (the window and little else; a first sight of a
// call site is decided in decide's frame): redsync sends its SET NX from a
// goroutine it has just started, whose stack a large frame would make grow.
func calledFromRedsync() bool {
	var w window
	n, stopped := callerPCs(w.pcs[:], &redsyncPCs) // from calledFromRedsync's caller on
	if stopped {
		return true // a return address into redsync's code
	}
	w.n = n
	h := w.hash()
	if m := verdicts.Load(); m != nil {
		if v := (*m)[h]; v != nil && v.w == w {
			return v.redsync
		}
	}
	return decide(&w, h)
}

// decide judges a window seen for the first time, remembering the verdict
// when the window decides it, and walks the whole stack when it does not.
//
//go:noinline
func decide(w *window, h uint64) bool {
	redsync, at, decided := judge(w)
	if !decided {
		return walkAll()
	}
	remember(h, &verdict{*w, redsync}, at)
	return redsync
}

func (w *window) hash() uint64 {
	// FNV-1a over the addresses, in four independent lanes (one address in
	// four each), so that the multiplications do not wait for each other.
	const prime = 1099511628211
	h := [4]uint64{14695981039346656037, 1, 2, 3}
	for i, pc := range w.pcs[:w.n] {
		h[i&3] = (h[i&3] ^ uint64(pc)) * prime
	}
	return ((h[0]*prime^h[1])*prime^h[2])*prime ^ h[3] ^ uint64(w.n)
}

// judge reads w's frames: redsync is true when one of them is redsync's, and
// decided says whether w alone decides it (see above). at is the return
// address of the first redsync frame found (zero when none is, or when
// its address cannot be told).
func judge(w *window) (redsync bool, at uintptr, decided bool) {
	pcs := w.pcs // CallersFrames keeps its slice: a copy, so that w stays on its caller's stack
	frames := runtime.CallersFrames(pcs[:w.n])
	beyond := -1 // frames seen since the outermost go-redis frame so far
	for {
		f, more := frames.Next()
		switch {
		case inRedsync(f.Function):
			// Frames list a return address less one, for every frame
			// inlined at it too.
			if i := slices.Index(pcs[:w.n], f.PC+1); i >= 0 {
				at = pcs[i]
			}
			return true, at, true
		case strings.HasPrefix(f.Function, goRedisPrefix):
			beyond = 0
		case beyond >= 0:
			beyond++
		}
		if !more {
			break
		}
	}
	return false, 0, w.n < windowFrames || beyond >= beyondGoRedis
}

// remember keeps v, unless maxVerdicts are kept already, and at, a return
// address into redsync's code (zero for none), unless it is kept already or
// stopPCs are.
func remember(h uint64, v *verdict, at uintptr) {
	verdictsMu.Lock()
	defer verdictsMu.Unlock()
	if at != 0 && !slices.Contains(redsyncPCs[:], at) {
		if i := slices.Index(redsyncPCs[:], 0); i >= 0 {
			atomic.StoreUintptr(&redsyncPCs[i], at)
		}
	}
	old := verdicts.Load()
	size := 0
	if old != nil {
		size = len(*old)
	}
	if size >= maxVerdicts {
		return
	}
	m := make(map[uint64]*verdict, size+1)
	if old != nil {
		for k, x := range *old {
			m[k] = x
		}
	}
	m[h] = v
	verdicts.Store(&m)
}

// walkAll looks for a redsync frame on the whole stack.
func walkAll() bool {
	var pcs [stackChunk]uintptr
	skip := 4 // runtime.Callers, walkAll, decide, calledFromRedsync
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

// stopAt returns how many of pcs there are up to the first that is one of
// stop's non-zero entries, all when none is, and whether one is.
func stopAt(pcs []uintptr, stop *[stopPCs]uintptr) (n int, stopped bool) {
	for i, pc := range pcs {
		for j := range stop {
			if s := atomic.LoadUintptr(&stop[j]); s != 0 && s == pc {
				return i + 1, true
			}
		}
	}
	return len(pcs), false
}

// inRedsync reports whether fn, a function name as runtime.Frame spells it
// ("github.com/go-redsync/redsync/v4.(*Mutex).acquire"), belongs to a package
// of the redsync module.
func inRedsync(fn string) bool {
	rest, ok := strings.CutPrefix(fn, Library)
	return ok && rest != "" && (rest[0] == '.' || rest[0] == '/')
}

// callersSlow is callerPCs through runtime.Callers: the return addresses of
// the callers of callerPCs's caller.
//
//go:noinline
func callersSlow(pcs []uintptr) int {
	return runtime.Callers(4, pcs) // runtime.Callers, callersSlow, callerPCs, its caller
}
