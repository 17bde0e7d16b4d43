package harness

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/registry"
)

// poll is how often the Wait methods look again.
const poll = 5 * time.Millisecond

// Log is an append-only record, safe for concurrent use. The zero value is
// an empty log.
type Log[T any] struct {
	mu    sync.Mutex // guards items
	items []T
}

// Add appends v.
func (l *Log[T]) Add(v T) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.items = append(l.items, v)
}

// All returns a copy of everything added, in order.
func (l *Log[T]) All() []T {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.items)
}

// Take returns everything added since the last Take and forgets it.
func (l *Log[T]) Take() []T {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.items
	l.items = nil
	return out
}

// Where returns the items keep accepts, in order.
func (l *Log[T]) Where(keep func(T) bool) []T {
	var out []T
	for _, v := range l.All() {
		if keep(v) {
			out = append(out, v)
		}
	}
	return out
}

// Wait waits until some item is accepted by keep, or within has passed,
// and returns the accepted items (none when the wait timed out).
func (l *Log[T]) Wait(keep func(T) bool, within time.Duration) []T {
	deadline := time.Now().Add(within)
	for {
		if out := l.Where(keep); len(out) > 0 || time.Now().After(deadline) {
			return out
		}
		time.Sleep(poll)
	}
}

// LostEvent is one OnLost call.
type LostEvent struct {
	At   time.Time
	Lock registry.Lock
	Err  error
}

// LostLog records OnLost calls; it is safe for concurrent use, and the zero
// value is an empty log.
type LostLog struct{ Log[LostEvent] }

// Record records a call; it is an OnLost function (watchdog.WithOnLost).
func (l *LostLog) Record(lk registry.Lock, err error) {
	l.Add(LostEvent{At: time.Now(), Lock: lk, Err: err})
}

// ForKey returns the reports of key, on any client.
func (l *LostLog) ForKey(key string) []LostEvent {
	return l.Where(func(ev LostEvent) bool { return ev.Lock.Key == key })
}

// ForLock returns the reports of key on client c.
func (l *LostLog) ForLock(c redis.UniversalClient, key string) []LostEvent {
	return l.Where(func(ev LostEvent) bool { return ev.Lock.Key == key && ev.Lock.Client == c })
}

// Of returns the reports of the lock that holds key with value.
func (l *LostLog) Of(key, value string) []LostEvent {
	return l.Where(func(ev LostEvent) bool { return ev.Lock.Key == key && ev.Lock.Value == value })
}

// WaitKey waits until key has been reported, or within has passed, and
// returns its reports.
func (l *LostLog) WaitKey(key string, within time.Duration) []LostEvent {
	return l.Wait(func(ev LostEvent) bool { return ev.Lock.Key == key }, within)
}

// WaitOf waits until the lock that holds key with value has been reported,
// or within has passed, and returns its reports.
func (l *LostLog) WaitOf(key, value string, within time.Duration) []LostEvent {
	return l.Wait(func(ev LostEvent) bool { return ev.Lock.Key == key && ev.Lock.Value == value }, within)
}

// DescribeLost lists reports (at most most of them), with times relative to
// since, for failure messages.
func DescribeLost(evs []LostEvent, since time.Time, most int) string {
	if len(evs) == 0 {
		return "no OnLost call"
	}
	var parts []string
	for i, ev := range evs {
		if i == most {
			parts = append(parts, fmt.Sprintf("... and %d more", len(evs)-most))
			break
		}
		parts = append(parts, fmt.Sprintf("[%+.3fs %s value %s: %v]", ev.At.Sub(since).Seconds(), ev.Lock.Key, Short(ev.Lock.Value), ev.Err))
	}
	return fmt.Sprintf("%d OnLost calls: %s", len(evs), strings.Join(parts, " "))
}

// Short abbreviates a lock value (a random token) for messages.
func Short(v string) string {
	if len(v) > 12 {
		return v[:12] + "…"
	}
	return v
}

// bufferLimit is how much a LockedBuffer keeps.
const bufferLimit = 4 << 20

// LockedBuffer is an io.Writer that keeps the first 4 MiB written to it
// (a watchdog's log); it is safe for concurrent use, and the zero value is
// an empty buffer.
type LockedBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

// Write keeps what fits of p; it never fails.
func (b *LockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.b.Len() < bufferLimit {
		b.b.Write(p)
	}
	return len(p), nil
}

// String returns what was kept.
func (b *LockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Tail returns the last n lines (every line when n is 0).
func (b *LockedBuffer) Tail(n int) string {
	s := strings.TrimRight(b.String(), "\n")
	lines := strings.Split(s, "\n")
	if n <= 0 || len(lines) <= n {
		return s
	}
	lines = append([]string{fmt.Sprintf("... %d earlier lines", len(lines)-n)}, lines[len(lines)-n:]...)
	return strings.Join(lines, "\n")
}

// Ends returns the first n/2 lines and the last n-n/2 (every line when n
// is 0 or the log is no longer): what went wrong first, and how it ended.
func (b *LockedBuffer) Ends(n int) string {
	s := strings.TrimRight(b.String(), "\n")
	lines := strings.Split(s, "\n")
	if n <= 0 || len(lines) <= n {
		return s
	}
	head, tail := lines[:n/2], lines[len(lines)-(n-n/2):]
	out := append(slices.Clip(head), fmt.Sprintf("... %d lines between", len(lines)-n))
	return strings.Join(append(out, tail...), "\n")
}
