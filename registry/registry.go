package registry

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"weak"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/internal/table"
)

// Registry is the table of locks this process holds, per watched client. It
// learns about them through the hook [Registry.Watch] installs and the
// adapters given to [New].
//
// A Registry is safe for concurrent use, and none of its methods waits for
// Redis. The zero value is not usable: call [New].
type Registry struct {
	adapters []Adapter
	set      *table.Set

	// asked holds, for "set", "eval" and "evalsha" (lockCommandName's
	// names, in kinds' order), the indices in adapters of the adapters
	// to ask about it, in order.
	asked [len(kinds)][]int

	watchMu sync.Mutex // serialises Watch

	subsMu sync.Mutex                    // serialises changes to subs
	subs   atomic.Pointer[[]*subscriber] // read without a lock by the hook
}

type subscriber struct{ fn func(Event) }

// New returns a registry that recognises the lock commands of the given
// adapters, asked in order. Nil adapters are ignored. A registry without
// adapters tracks nothing, and watchdog.Attach refuses it.
func New(adapters ...Adapter) *Registry {
	r := &Registry{}
	var names []string
	for _, a := range adapters {
		if isNilValue(a) {
			continue
		}
		r.adapters = append(r.adapters, a)
		names = append(names, adapterName(a))
	}
	for i, a := range r.adapters {
		for k, name := range kinds {
			if asks(a, name) {
				r.asked[k] = append(r.asked[k], i)
			}
		}
	}
	kept := r.adapters
	r.set = table.NewSet(names, func(ctx context.Context) error { return probe(ctx, kept) })
	wr := weak.Make(r) // the set is bound to r (table.Bind) and must not keep it
	r.set.OnDrop = func(i table.Info) {
		if r := wr.Value(); r != nil && r.subscribed() {
			r.publish(Event{Kind: EventDropped, Lock: lockOf(i)})
		}
	}
	table.Bind(r, r.set)
	return r
}

// kinds are the names of the commands adapters are asked about.
var kinds = [...]string{"set", "eval", "evalsha"}

// asks reports whether a is to be asked about commands called name: yes,
// unless it is a [CommandSelector] that does not list name (or whose
// Commands panics).
func asks(a Adapter, name string) (yes bool) {
	s, ok := a.(CommandSelector)
	if !ok {
		return true
	}
	defer func() {
		if recover() != nil {
			yes = true
		}
	}()
	for _, n := range s.Commands() {
		if strings.EqualFold(n, name) {
			return true
		}
	}
	return false
}

// adapterName is a.Name(), or a's type when Name panics.
func adapterName(a Adapter) (name string) {
	defer func() {
		if recover() != nil {
			name = fmt.Sprintf("%T", a)
		}
	}()
	return a.Name()
}

// isNilValue reports whether v is nil or a nil pointer, map, slice, func,
// channel or interface inside an interface.
func isNilValue(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface, reflect.UnsafePointer:
		return rv.IsNil()
	}
	return false
}

// probe runs every adapter's probe (the version guard); a panicking probe
// is an error.
func probe(ctx context.Context, adapters []Adapter) (err error) {
	for _, a := range adapters {
		func() {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("registry: probe of adapter %s panicked: %v", adapterName(a), p)
				}
			}()
			if perr := a.Probe(ctx); perr != nil {
				err = fmt.Errorf("registry: adapter %s: %w", adapterName(a), perr)
			}
		}()
		if err != nil {
			return err
		}
	}
	return nil
}

// Watch installs the registry's hook on c, so that locks obtained through c
// are tracked. Call it once per client, before the client is used: older
// go-redis releases race when a hook is added while commands run.
//
// A second Watch of the same client does nothing and returns nil: the client
// keeps exactly one hook. Watch returns [ErrNilClient] for a nil client.
//
// When the watchdog finds that the application closed a watched client
// (redis.ErrClosed), it reports the client's locks lost and forgets the
// client: locks taken through a new client need a Watch of that client.
//
// The registry does not keep c alive: a client the application no longer
// refers to, with no lock tracked on it, is collected as if it had never
// been watched, and leaves the registry. While a lock is tracked on it the
// registry keeps it (the watchdog renews the lock through it, and its
// [Lock] names it). A client of a type of its own (a wrapper implementing
// redis.UniversalClient rather than the *redis.Client, *redis.ClusterClient
// or *redis.Ring go-redis makes) is found again by comparison: a wrapper of
// a type that is not comparable gets a new hook at each Watch.
//
// On a *redis.ClusterClient, commands sent inside Watch (optimistic
// transactions) bypass cluster-level hooks; neither upstream library does that.
func (r *Registry) Watch(c redis.UniversalClient) error {
	if isNilValue(c) {
		return ErrNilClient
	}
	r.watchMu.Lock()
	defer r.watchMu.Unlock()
	t, added := r.set.Add(c)
	if !added {
		return nil
	}
	if err := addHook(c, &hook{r: r, t: t}); err != nil {
		r.set.Remove(t)
		return err
	}
	return nil
}

// addHook adds h to c, turning a panic of a broken client (a wrapper around
// a nil client, say) into an error.
func addHook(c redis.UniversalClient, h redis.Hook) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("registry: Watch(%T): adding the hook panicked: %v", c, p)
		}
	}()
	c.AddHook(h)
	return nil
}

// Len returns the number of tracked locks over all watched clients.
func (r *Registry) Len() int {
	n := 0
	for _, t := range r.set.Holding() {
		n += t.Len()
	}
	return n
}

// Locks returns a snapshot of every tracked lock, client by client in Watch
// order; within a client the order is unspecified.
func (r *Registry) Locks() []Lock {
	var out []Lock
	for _, t := range r.set.Holding() {
		t.Each(func(e *table.Entry) { out = append(out, lockOf(t.InfoLocked(e))) })
	}
	return out
}

// Get returns the lock tracked under key on client c (for a lock over
// several keys, key is its first key).
func (r *Registry) Get(c redis.UniversalClient, key string) (Lock, bool) {
	t := r.set.Lookup(c)
	if t == nil {
		return Lock{}, false
	}
	t.Lock()
	defer t.Unlock()
	e := t.GetLocked(key)
	if e == nil {
		return Lock{}, false
	}
	return lockOf(t.InfoLocked(e)), true
}

// Subscribe registers fn to be called for every [Event], with no lockwatch
// lock held: the hook's events (obtained, refreshed, released, not held)
// synchronously on the goroutine that sent the command, and
// [EventDropped] on an attached watchdog's reporting goroutine, in order
// with its OnLost calls, so that a slow fn delays the application's own
// command or later reports, never a renewal. A panic of fn is recovered
// and counted (the watchdog's Stats.CallbackPanics). The returned function
// unsubscribes; it is idempotent.
func (r *Registry) Subscribe(fn func(Event)) (cancel func()) {
	if fn == nil {
		return func() {}
	}
	s := &subscriber{fn: fn}
	r.subsMu.Lock()
	old := r.subs.Load()
	var next []*subscriber
	if old != nil {
		next = append(next, *old...)
	}
	next = append(next, s)
	r.subs.Store(&next)
	r.subsMu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			r.subsMu.Lock()
			defer r.subsMu.Unlock()
			cur := r.subs.Load()
			if cur == nil {
				return
			}
			var next []*subscriber
			for _, o := range *cur {
				if o != s {
					next = append(next, o)
				}
			}
			r.subs.Store(&next)
		})
	}
}

func (r *Registry) subscribed() bool {
	subs := r.subs.Load()
	return subs != nil && len(*subs) > 0
}

func (r *Registry) publish(ev Event) {
	subs := r.subs.Load()
	if subs == nil {
		return
	}
	for _, s := range *subs {
		r.call(s, ev)
	}
}

// call runs one subscriber, recovering its panic: a subscriber's panic is
// counted (the watchdog's Stats.CallbackPanics) and logged by an attached
// watchdog, and never reaches the application or the watchdog.
func (r *Registry) call(s *subscriber, ev Event) {
	defer func() {
		if p := recover(); p != nil {
			r.set.Panicked("subscriber", p)
		}
	}()
	s.fn(ev)
}

// apply records one classified command in t, sent at sent (0: now), and
// publishes what changed.
// It runs in the hook for every lock command, and is kept small: an
// Action's Op is the table's Op (opsAgree), and an event is made only
// for a subscriber.
func (r *Registry) apply(t *table.Table, source int, a *Action, sent int64) {
	if a.Op == OpNone || a.Op > OpAttempt {
		return
	}
	c := table.Change{Op: table.Op(a.Op), Key: a.Key, Keys: a.Keys, Value: a.Value, TTL: a.TTL, Source: uint8(source), Sent: sent}
	if r.subscribed() {
		r.applyPublished(t, c)
		return
	}
	t.ApplyNow(&c)
}

// opsAgree holds when every Op but OpNone is the table.Op of the same
// name, as apply assumes (the array's length is negative otherwise, and
// the package does not build).
const opsAgree = uint8(table.OpObtain-table.Op(OpObtain)) |
	uint8(table.OpRefresh-table.Op(OpRefresh)) |
	uint8(table.OpNotHeld-table.Op(OpNotHeld)) |
	uint8(table.OpRelease-table.Op(OpRelease)) |
	uint8(table.OpAttempt-table.Op(OpAttempt))

var _ [-int(opsAgree)]struct{}

// events are the events of the table's ops, by op (none for an attempt).
var events = [...]EventKind{
	table.OpObtain:  EventObtained,
	table.OpRefresh: EventRefreshed,
	table.OpNotHeld: EventNotHeld,
	table.OpRelease: EventReleased,
	table.OpAttempt: 0,
}

// applyPublished is apply's end when someone subscribed: the event carries
// a snapshot of the lock taken as the change was made (the snapshot costs
// an allocation, which a registry without subscribers does not pay).
func (r *Registry) applyPublished(t *table.Table, c table.Change) {
	snap := new(table.Info)
	c.Snapshot = snap
	if e, _ := t.ApplyNow(&c); e != nil && events[c.Op] != 0 {
		r.publish(Event{Kind: events[c.Op], Lock: lockOf(*snap)})
	}
}

// lockOf turns a table snapshot into a Lock.
func lockOf(i table.Info) Lock {
	return Lock{
		Client:      i.Client,
		Key:         i.Key,
		Keys:        i.Keys,
		Value:       i.Value,
		TTL:         i.TTL,
		Source:      i.Source,
		ObtainedAt:  i.ObtainedAt,
		ConfirmedAt: i.ConfirmedAt,
		Renewals:    i.Renewals,
	}
}

// String describes the registry for logs.
func (r *Registry) String() string {
	names := r.set.Names
	return fmt.Sprintf("registry(%v, %d clients, %d locks)", names, len(r.set.Tables()), r.Len())
}
