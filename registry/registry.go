package registry

import (
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Registry is the table of locks this process holds, per watched client. It
// learns about them through the hook [Registry.Watch] installs and the
// adapters given to [New].
//
// A Registry is safe for concurrent use. The zero value is not usable: call [New].
type Registry struct {
	adapters []Adapter
	names    []string
	epoch    time.Time // origin of the monotonic times in entries

	mu     sync.Mutex // guards tables and order
	tables map[redis.UniversalClient]*table
	order  []*table // in Watch order, so that iteration is deterministic

	subsMu sync.Mutex                    // serialises changes to subs
	subs   atomic.Pointer[[]*subscriber] // read without a lock by the hook
}

// table holds the locks tracked on one watched client.
type table struct {
	client redis.UniversalClient
	mu     sync.Mutex        // guards locks and gen
	locks  map[string]*entry // by Redis key
	// gen changes whenever a tracked (key, value) stops being tracked, so
	// that Hold can skip checking refs planned at the current generation.
	gen uint64
	// releasing counts the releases on their way to Redis, by lock: Drop
	// leaves those locks to the release.
	releasing map[releasing]int
	// sending is read-held while the watchdog sends renewals for this
	// client; a release takes it for writing before it returns to the
	// application, so that no renewal of a released lock is sent after the
	// release returned (invariant I3).
	sending sync.RWMutex
}

type subscriber struct{ fn func(Event) }

// New returns a registry that recognises the lock commands of the given
// adapters, asked in order. Nil adapters are ignored. A registry without
// adapters tracks nothing, and watchdog.Attach refuses it.
func New(adapters ...Adapter) *Registry {
	r := &Registry{epoch: time.Now(), tables: make(map[redis.UniversalClient]*table)}
	for _, a := range adapters {
		if isNilValue(a) {
			continue
		}
		r.adapters = append(r.adapters, a)
		r.names = append(r.names, adapterName(a))
	}
	return r
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

// Adapters returns the registry's adapters, in the order they are asked.
func (r *Registry) Adapters() []Adapter {
	return append([]Adapter(nil), r.adapters...)
}

// Watch installs the registry's hook on c, so that locks obtained through c
// are tracked. Call it once per client, before the client is used: older
// go-redis releases race when a hook is added while commands run.
//
// A second Watch of the same client does nothing and returns nil: the client
// keeps exactly one hook. Watch returns [ErrNilClient] for a nil client.
//
// On a *redis.ClusterClient, commands sent inside Watch (optimistic
// transactions) bypass cluster-level hooks; neither upstream library does that.
func (r *Registry) Watch(c redis.UniversalClient) error {
	if isNil(c) {
		return ErrNilClient
	}
	r.mu.Lock()
	if _, ok := r.tables[c]; ok {
		r.mu.Unlock()
		return nil
	}
	t := &table{client: c, locks: make(map[string]*entry), gen: 1, releasing: make(map[releasing]int)}
	r.tables[c] = t
	r.order = append(r.order, t)
	r.mu.Unlock()
	if err := addHook(c, &hook{r: r, t: t}); err != nil {
		r.mu.Lock()
		delete(r.tables, c)
		r.order = slices.DeleteFunc(r.order, func(o *table) bool { return o == t })
		r.mu.Unlock()
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

func isNil(c redis.UniversalClient) bool { return isNilValue(c) }

// Clients returns the watched clients in the order they were watched.
func (r *Registry) Clients() []redis.UniversalClient {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]redis.UniversalClient, len(r.order))
	for i, t := range r.order {
		out[i] = t.client
	}
	return out
}

func (r *Registry) tableOf(c redis.UniversalClient) *table {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tables[c]
}

func (r *Registry) tablesSnapshot() []*table {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*table(nil), r.order...)
}

// Len returns the number of tracked locks over all watched clients.
func (r *Registry) Len() int {
	n := 0
	for _, t := range r.tablesSnapshot() {
		t.mu.Lock()
		n += len(t.locks)
		t.mu.Unlock()
	}
	return n
}

// entryOf returns the entry ref names if it is still tracked with ref's
// value, or nil. Called with t.mu held.
func (t *table) entryOf(ref Ref) *entry {
	e := ref.e
	if e == nil {
		e = t.locks[ref.Key]
	} else if e.detached {
		return nil
	}
	if e == nil || e.value != ref.Value {
		return nil
	}
	return e
}

// Plan returns a [Ref] for every lock tracked on client c, in no particular
// order, for the watchdog to renew: those obtained at or before heldSince
// (when it is not zero) in held, the others in refs. When keep is not nil,
// only the locks it keeps are listed. Refs from Plan make
// [Registry.HoldSince] and [Registry.Confirm] cheaper than refs built by
// hand.
func (r *Registry) Plan(c redis.UniversalClient, heldSince time.Time, keep func(Lock) bool) (refs, held []Ref) {
	r.PlanBatches(c, heldSince, keep, int(^uint(0)>>1), func(rs, hs []Ref) bool {
		refs, held = rs, hs // one batch: the size has no bound
		return true
	})
	return refs, held
}

// PlanBatches is [Registry.Plan] in batches: it calls fn with the refs and
// held refs of at most size locks at a time, without holding the table, and
// stops when fn returns false. Locks released while it runs and not listed
// yet are not listed; locks obtained while it runs may be. It also lets
// the client's lock commands through every few thousand locks, so a large
// table does not hold them up.
func (r *Registry) PlanBatches(c redis.UniversalClient, heldSince time.Time, keep func(Lock) bool, size int, fn func(refs, held []Ref) bool) {
	t := r.tableOf(c)
	if t == nil || size < 1 {
		return
	}
	cutoff := int64(-1 << 63)
	if !heldSince.IsZero() {
		cutoff = r.since(heldSince)
	}
	t.mu.Lock()
	var (
		refs = make([]Ref, 0, min(size, len(t.locks)))
		held []Ref
		n    = 0
	)
	for k, e := range t.locks {
		ref := Ref{Key: k, Value: e.value, TTL: e.ttl, e: e}
		switch {
		case e.obtained <= cutoff:
			held = append(held, ref)
		case keep == nil || keep(r.lockOf(t.client, k, *e)):
			refs = append(refs, ref)
		}
		n++
		full := len(refs)+len(held) >= size
		if !full && n%planBatch != 0 {
			continue
		}
		// Go's map iteration allows changes between steps: the table is
		// let go here and taken again before the next step.
		nextCap := min(size, len(t.locks))
		t.mu.Unlock()
		if full {
			if !fn(refs, held) {
				return
			}
			refs, held = make([]Ref, 0, nextCap), nil
		} else {
			runtime.Gosched()
		}
		t.mu.Lock()
	}
	t.mu.Unlock()
	if len(refs) > 0 || len(held) > 0 {
		fn(refs, held)
	}
}

// planBatch is how many locks PlanBatches lists between two pauses.
const planBatch = 4096

// unmark ends a release mark set by the hook.
func (t *table) unmark(rel releasing) {
	if rel.key == "" {
		return
	}
	t.mu.Lock()
	if t.releasing[rel]--; t.releasing[rel] <= 0 {
		delete(t.releasing, rel)
	}
	t.mu.Unlock()
}

// LenOf returns the number of locks tracked on client c.
func (r *Registry) LenOf(c redis.UniversalClient) int {
	t := r.tableOf(c)
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.locks)
}

// Locks returns a snapshot of every tracked lock, client by client in Watch
// order; within a client the order is unspecified.
func (r *Registry) Locks() []Lock {
	var out []Lock
	for _, t := range r.tablesSnapshot() {
		t.mu.Lock()
		for k, e := range t.locks {
			out = append(out, r.lockOf(t.client, k, *e))
		}
		t.mu.Unlock()
	}
	return out
}

// Range calls fn for each lock tracked on client c until fn returns false.
// It holds c's table lock while it runs: fn must be quick and must not call
// methods of r. Range is how the watchdog plans a sweep without copying the
// table.
func (r *Registry) Range(c redis.UniversalClient, fn func(Lock) bool) {
	t := r.tableOf(c)
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, e := range t.locks {
		if !fn(r.lockOf(t.client, k, *e)) {
			return
		}
	}
}

// Get returns the lock tracked under key on client c.
func (r *Registry) Get(c redis.UniversalClient, key string) (Lock, bool) {
	t := r.tableOf(c)
	if t == nil {
		return Lock{}, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.locks[key]
	if !ok {
		return Lock{}, false
	}
	return r.lockOf(t.client, key, *e), true
}

// Confirm records that Redis renewed the given locks of client c at the
// given time (the time the renewal was sent). A ref whose key is no longer
// tracked with the same value is skipped: a release or a new obtain that
// raced the renewal wins. Confirm returns how many locks it updated.
func (r *Registry) Confirm(c redis.UniversalClient, at time.Time, refs []Ref) int {
	t := r.tableOf(c)
	if t == nil {
		return 0
	}
	ns := r.since(at)
	n := 0
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, ref := range refs {
		e := t.entryOf(ref)
		if e == nil {
			continue
		}
		if ns > e.confirmed {
			e.confirmed = ns
		}
		e.renewals++
		n++
	}
	return n
}

// Hold filters refs in place to those still tracked on client c with the
// same value and returns them. Until done is called, a release of any lock
// of c that the hook sees does not return to the application: the watchdog
// sends its renewals between Hold and done, so that once a release has
// returned, no renewal of that lock is sent after it. done must be called
// exactly once, from any goroutine; later calls do nothing.
func (r *Registry) Hold(c redis.UniversalClient, refs []Ref) (live []Ref, done func()) {
	return r.HoldSince(c, refs, 0)
}

// Generation returns a number that changes whenever a lock tracked on
// client c stops being tracked with its value (released, dropped, or
// obtained again with another value). Refs taken from the registry after
// reading it can be held with [Registry.HoldSince].
func (r *Registry) Generation(c redis.UniversalClient) uint64 {
	t := r.tableOf(c)
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.gen
}

// HoldSince is [Registry.Hold] for refs that were all tracked at
// generation gen (read with [Registry.Generation] before the refs were
// taken from the registry): when nothing has stopped being tracked since,
// it keeps every ref without looking each one up. A gen of 0 always checks.
func (r *Registry) HoldSince(c redis.UniversalClient, refs []Ref, gen uint64) (live []Ref, done func()) {
	t := r.tableOf(c)
	if t == nil {
		return nil, func() {}
	}
	t.sending.RLock()
	t.mu.Lock()
	if gen != 0 && gen == t.gen {
		live = refs
	} else {
		live = refs[:0]
		for _, ref := range refs {
			if t.entryOf(ref) != nil {
				live = append(live, ref)
			}
		}
	}
	t.mu.Unlock()
	var once sync.Once
	return live, func() { once.Do(t.sending.RUnlock) }
}

// Drop untracks the lock key of client c if it is still tracked with value
// and no release of it is on its way to Redis (the release untracks it),
// waits until no renewal held (see [Registry.Hold]) before it is in flight,
// and reports it to subscribers as [EventDropped]. It returns the lock as it
// was. Drop must not be called between Hold and its done.
func (r *Registry) Drop(c redis.UniversalClient, key, value string) (Lock, bool) {
	t := r.tableOf(c)
	if t == nil {
		return Lock{}, false
	}
	t.mu.Lock()
	e, ok := t.locks[key]
	if !ok || e.value != value || t.releasing[releasing{key, value}] > 0 {
		t.mu.Unlock()
		return Lock{}, false
	}
	delete(t.locks, key)
	e.detached = true
	t.gen++
	t.mu.Unlock()
	// As a release does: wait for renewals planned before the drop, so that
	// none is sent for the lock once Drop has returned.
	t.sending.Lock()
	//lint:ignore SA2001 the empty critical section is the point: it waits for readers.
	t.sending.Unlock()
	l := r.lockOf(t.client, key, *e)
	r.publish(Event{Kind: EventDropped, Lock: l})
	return l, true
}

// Subscribe registers fn to be called for every [Event], synchronously, on
// the goroutine that caused it (for hook events, the goroutine that sent the
// command), after the table lock is released. fn must be quick and must not
// block. The returned function unsubscribes; it is idempotent.
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

func (r *Registry) publish(ev Event) {
	subs := r.subs.Load()
	if subs == nil {
		return
	}
	for _, s := range *subs {
		s.fn(ev)
	}
}

// apply records one classified command in t and publishes what changed.
func (r *Registry) apply(t *table, source int, a Action) {
	now := r.since(time.Now())
	var (
		ev   Event
		emit bool
	)
	t.mu.Lock()
	old, had := t.locks[a.Key]
	switch a.Op {
	case OpObtain:
		e := entry{value: a.Value, ttl: a.TTL, obtained: now, confirmed: now, source: uint8(source)}
		switch {
		case !had:
			t.locks[a.Key] = &e
		case old.value == a.Value:
			e.obtained, e.renewals = old.obtained, old.renewals
			*old = e
		default:
			*old = e
			t.gen++ // the old value is no longer tracked
		}
		ev, emit = Event{Kind: EventObtained, Lock: r.lockOf(t.client, a.Key, e)}, true
	case OpRefresh:
		if had && old.value == a.Value {
			old.ttl, old.confirmed = a.TTL, now
			ev, emit = Event{Kind: EventRefreshed, Lock: r.lockOf(t.client, a.Key, *old)}, true
		}
	case OpNotHeld, OpRelease:
		if had && old.value == a.Value {
			delete(t.locks, a.Key)
			old.detached = true
			t.gen++
			kind := EventReleased
			if a.Op == OpNotHeld {
				kind = EventNotHeld
			}
			ev, emit = Event{Kind: kind, Lock: r.lockOf(t.client, a.Key, *old)}, true
		}
	}
	t.mu.Unlock()
	if a.Op == OpRelease || a.Op == OpNotHeld {
		// Wait for renewals in flight on this client: they were planned
		// before the release and must finish before it returns.
		t.sending.Lock()
		//lint:ignore SA2001 the empty critical section is the point: it waits for readers.
		t.sending.Unlock()
	}
	if emit {
		r.publish(ev)
	}
}

func (r *Registry) since(t time.Time) int64 { return int64(t.Sub(r.epoch)) }

func (r *Registry) at(ns int64) time.Time { return r.epoch.Add(time.Duration(ns)) }

func (r *Registry) lockOf(c redis.UniversalClient, key string, e entry) Lock {
	return Lock{
		Client:      c,
		Key:         key,
		Value:       e.value,
		TTL:         e.ttl,
		Source:      r.names[e.source],
		ObtainedAt:  r.at(e.obtained),
		ConfirmedAt: r.at(e.confirmed),
		Renewals:    int64(e.renewals),
	}
}

// String describes the registry for logs.
func (r *Registry) String() string {
	return fmt.Sprintf("registry(%v, %d clients, %d locks)", r.names, len(r.Clients()), r.Len())
}
