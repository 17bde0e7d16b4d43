package table

import (
	"context"
	"runtime"
	"sync"
	"weak"
)

// The registry and the watchdog are two packages of lockwatch's API that
// share one thing, a registry's set of tables. registry.New makes the set
// and binds it to its *Registry (Bind); watchdog.Attach finds it there
// (SetOf). The binding holds the registry weakly: a registry nobody uses
// any more goes, and its binding with it.

// bound maps a weak pointer to an owner to its set.
var bound sync.Map // weak.Pointer[T] -> *Set

// Bind makes s the set of owner. The set must not refer to owner other
// than weakly, or neither is ever collected.
func Bind[T any](owner *T, s *Set) {
	k := weak.Make(owner)
	bound.Store(k, s)
	runtime.AddCleanup(owner, func(k weak.Pointer[T]) { bound.Delete(k) }, k)
}

// SetOf returns the set bound to owner, nil when there is none.
func SetOf[T any](owner *T) *Set {
	if owner == nil {
		return nil
	}
	v, _ := bound.Load(weak.Make(owner))
	s, _ := v.(*Set)
	return s
}

type untrackedKey struct{}

// WithoutTracking returns a context whose lock commands the registry's
// hook ignores: the watchdog's renewals, and the application's commands
// marked by registry.WithoutTracking. A context already made so is
// returned as it is, without allocating.
func WithoutTracking(ctx context.Context) context.Context {
	if Untracked(ctx) {
		return ctx
	}
	return context.WithValue(ctx, untrackedKey{}, true)
}

// Untracked reports whether ctx was made by WithoutTracking.
func Untracked(ctx context.Context) bool {
	return ctx != nil && ctx.Value(untrackedKey{}) != nil
}
