package watchdog

import (
	"cmp"
	"context"
	"errors"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/internal/scripts"
	"github.com/lockwatch/lockwatch/internal/table"
	lwscripts "github.com/lockwatch/lockwatch/scripts"
)

// A pipe is one renewal pipeline and the buffers it reuses: the entries it
// renews, their results, and the arguments of its script calls. Keys and
// values go into the arguments as pointers to their entries (see
// table.Entry.KeyArg), so that building a pipeline allocates nothing per
// lock. A pipeline is usually one call; on a cluster, one call per slot.
type pipe struct {
	l       *lane
	entries []*table.Entry // held (Table.Hold) while the pipeline runs
	res     []int8         // per entry: table.Renewed, Gone, Taken or Failed
	ttls    []int64        // per entry: the TTL sent, in milliseconds
	ends    []int          // where each call's entries end in entries
	args    [][]any        // per call, reused
	boxes   map[box]any    // numbers boxed for args (boxed)
	cmds    []*redis.Cmd
	sent    time.Time
	sentNs  atomic.Int64          // sent, in ns since the set's epoch, for the scheduler (0: not sent yet)
	err     error                 // the first error of the pipeline, nil when none
	failed  int                   // calls that failed
	heads   []float32             // per entry: the remaining TTL, as a fraction of its TTL, when built
	dls     []int64               // per entry: its deadline when built (ns since the set's epoch)
	built   int64                 // when it was built (ns since the set's epoch)
	to      redis.UniversalClient // where to send it: nil for the table's client (a Ring's shard otherwise)
	toErr   error                 // why it cannot be sent (a Ring's shard not live); nil when it can

	// What the scheduler knows of it, set when it is built.
	deadline int64         // the least deadline of its locks (ns since the set's epoch)
	expires  int64         // the least expiry E of its locks (ns since the set's epoch)
	tellAt   int64         // the least tell time of its locks whose holders were not told
	tellLag  int64         // the scheduler's lag tellAt was computed for
	markSent int64         // the send time its release noted its locks' keys may live a TTL past (math.MaxInt64: none)
	marked   []bool        // for each of its entries, whether its release noted that
	giveUp   int64         // the least give-up time of its locks
	hedgeAt  int64         // when it is hedged if it has not answered (hedgeTime)
	wait     time.Duration // how long it is waited for once sent
	callKeys int           // the keys of its largest call
	weight   int           // what it counts against the lane's limit while in flight (weigh)
	missed   int           // its locks past their deadline when it was built
	hedge    bool          // a hedge (or a renewal at once): not hedged again, but given up waiting for
	key      int64         // a sweep's call: the least tell key of its locks (filled by the sweep)
	sweep    *sweepRun     // a sweep's call: the sweep it belongs to

	// Buffers settle reuses: the locks to retry, and those to renew again
	// before the next tick.
	retry, again []*table.Entry

	// state orders the end of a pipeline: whichever of its answer and its
	// hedging comes first decides, under the lane's mutex.
	state atomic.Int32 // pipeIdle, pipeRunning, pipeFinished, pipeAbandoned
	done  func(error)  // called once when the pipeline ends; may be nil
}

const (
	pipeIdle int32 = iota
	pipeRunning
	pipeFinished
	pipeAbandoned
)

// reset empties p for its next use.
func (p *pipe) reset() {
	clear(p.entries)
	p.entries = p.entries[:0]
	p.ends = p.ends[:0]
	for i := range p.args {
		clear(p.args[i])
		p.args[i] = p.args[i][:0]
	}
	clear(p.cmds)
	p.cmds = p.cmds[:0]
	p.to, p.toErr = nil, nil
	p.err = nil
	p.failed = 0
	p.done, p.sweep = nil, nil
	p.key, p.missed, p.hedge = 0, 0, false
	p.sentNs.Store(0)
	p.state.Store(pipeIdle)
}

// lateSince counts p's locks whose deadline passed between its build and
// now. At its answer: renewals sent in time (not counted as missed then)
// but not confirmed in time, because the process did not write them or
// read their answer in time, or the endpoint was slow; added to the
// deadlines missed before any of them is reported lost, it keeps that
// counter ahead of every loss. At its start: a call whose goroutine the
// host ran late (lane.noteStartedLate).
func (p *pipe) lateSince(now int64) int {
	n := 0
	for _, d := range p.dls {
		if d >= p.built && d < now {
			n++
		}
	}
	return n
}

// order sorts entries so that those that can share a script call are
// adjacent: by hash slot (on a cluster), then single-key locks before
// locks over several keys, values sent as they are before digests, then
// by TTL. Entries already in that order are left alone, which is the usual
// case on one client with one TTL. It reads TTLs: call it with the table
// locked.
func order(es []*table.Entry) {
	cmpEntries := func(a, b *table.Entry) int {
		if c := cmp.Compare(a.Slot(), b.Slot()); c != 0 {
			return c
		}
		if c := cmp.Compare(shape(a), shape(b)); c != 0 {
			return c
		}
		return cmp.Compare(a.TTL, b.TTL)
	}
	if !slices.IsSortedFunc(es, cmpEntries) {
		slices.SortFunc(es, cmpEntries)
	}
}

// shape is what kind of call e goes in: 0 for a lock over one key whose
// value is sent, 1 over one key by digest, 2 and 3 over several keys.
func shape(e *table.Entry) int {
	n := 0
	if e.Multi() {
		n = 2
	}
	if len(e.Value) > table.DigestAbove {
		n++
	}
	return n
}

// orderBySlot sorts entries by hash slot, then by shape; it reads only
// what never changes in an entry, so it needs no table lock.
func orderBySlot(es []*table.Entry) {
	cmpEntries := func(a, b *table.Entry) int {
		if c := cmp.Compare(a.Slot(), b.Slot()); c != 0 {
			return c
		}
		return cmp.Compare(shape(a), shape(b))
	}
	if !slices.IsSortedFunc(es, cmpEntries) {
		slices.SortFunc(es, cmpEntries)
	}
}

// build cuts p.entries (ordered, see order) into script calls of at most
// chunk keys and maxCallBytes (a call of one lock may pass it), none
// spanning two slots or two shapes, and writes their arguments; it also
// notes what the scheduler needs of p at now (ns since the set's epoch)
// for a scheduler lagging by lag: its least deadline and tell time, its
// locks past their deadline, its largest call. It must be called with t
// locked (TTLs change under it). chunk 1 means one lock a call.
func (p *pipe) build(t *table.Table, chunk int, now, lag, tellLag int64) {
	es := p.entries
	p.ttls = p.ttls[:0]
	p.heads = p.heads[:0]
	p.dls = p.dls[:0]
	p.built = now
	p.deadline, p.tellAt, p.giveUp, p.callKeys, p.missed = math.MaxInt64, math.MaxInt64, math.MaxInt64, 0, 0
	p.expires = math.MaxInt64
	p.tellLag = tellLag
	p.markSent = math.MaxInt64
	for _, e := range es {
		p.ttls = append(p.ttls, ttlMillis(e.TTL))
		head := float32(1)
		if e.TTL > 0 {
			head = float32(float64(e.Confirmed+int64(e.TTL)-now) / float64(e.TTL))
		}
		p.heads = append(p.heads, head)
		d := deadlineOf(e)
		p.dls = append(p.dls, d)
		p.deadline = min(p.deadline, d)
		p.expires = min(p.expires, expiry(e))
		if d < now {
			p.missed++
		}
		if !t.ToldLocked(e) {
			p.tellAt = min(p.tellAt, tellAt(e, tellLag))
		}
		p.giveUp = min(p.giveUp, giveUpTime(t, e, lag))
	}
	for start := 0; start < len(es); {
		first := es[start]
		kind := shape(first)
		end, keys, bytes := start, 0, 0
		shared := true
		for end < len(es) {
			e := es[end]
			n, b := t.KeyCountLocked(e), callBytes(t, e)
			if end > start && (e.Slot() != first.Slot() || shape(e) != kind || keys+n > chunk || bytes+b > maxCallBytes) {
				break
			}
			shared = shared && e.TTL == first.TTL
			keys, bytes = keys+n, bytes+b
			end++
		}
		p.addCall(t, es[start:end], p.ttls[start:end], kind, shared, keys)
		p.ends = append(p.ends, end)
		p.callKeys = max(p.callKeys, keys)
		start = end
	}
}

// addCall writes the arguments of one renew call for es, of the given
// shape. It allocates nothing once p's buffers have grown (see
// TestBuildAllocatesNothing): keys, values and digests go in as pointers,
// numbers boxed once (boxed), the mode from modeArgs.
func (p *pipe) addCall(t *table.Table, es []*table.Entry, ttls []int64, kind int, shared bool, keys int) {
	i := len(p.ends)
	if i == len(p.args) {
		p.args = append(p.args, nil)
	}
	multi, digest := kind >= 2, kind%2
	a := p.args[i][:0]
	a = append(a, "evalsha", lwscripts.RenewSHA1, p.boxedInt(keys))
	for _, e := range es {
		a = append(a, e.KeyArg())
		if multi {
			ks := t.KeysLocked(e)
			for k := 1; k < len(ks); k++ {
				a = append(a, table.StringArg(&ks[k]))
			}
		}
	}
	value := func(e *table.Entry) any {
		if digest == 1 {
			return t.DigestArgLocked(e)
		}
		return e.ValueArg()
	}
	switch {
	case multi:
		a = append(a, modeArgs[scripts.ModeMulti][digest])
		for j, e := range es {
			a = append(a, p.boxedInt(t.KeyCountLocked(e)), value(e), p.boxed(ttls[j]))
		}
	case shared:
		a = append(a, modeArgs[scripts.ModeShared][digest])
		for _, e := range es {
			a = append(a, value(e))
		}
		a = append(a, p.boxed(ttls[0]))
	default:
		a = append(a, modeArgs[scripts.ModePerLock][digest])
		for _, e := range es {
			a = append(a, value(e))
		}
		for _, ttl := range ttls {
			a = append(a, p.boxed(ttl))
		}
	}
	p.args[i] = a
}

// modeArgs holds the renew script's mode arguments by layout, each as it
// is sent with values [0] and with digests [1], boxed once: a string boxed
// anew allocates.
var modeArgs = func() map[string][2]any {
	m := make(map[string][2]any)
	for _, mode := range []string{scripts.ModeShared, scripts.ModePerLock, scripts.ModeMulti} {
		m[mode] = [2]any{scripts.Mode(mode, false), scripts.Mode(mode, true)}
	}
	return m
}()

// maxBoxes bounds the numbers a pipe keeps boxed (boxed).
const maxBoxes = 1024

// A box is a number as boxed: a TTL (int64) or a count of keys (int).
type box struct {
	n     int64
	isInt bool
}

// boxed returns n, a TTL, as a command argument. A number from 256 up
// boxed anew allocates (the runtime keeps the smaller ones boxed); p keeps
// those it has boxed, up to maxBoxes of them: the TTLs and key counts of
// the locks it renews, usually a handful.
func (p *pipe) boxed(n int64) any {
	if n >= 0 && n < 256 {
		return n
	}
	return p.box(box{n: n})
}

// boxedInt is boxed for a count of keys, an int.
func (p *pipe) boxedInt(n int) any {
	if n >= 0 && n < 256 {
		return n
	}
	return p.box(box{n: int64(n), isInt: true})
}

func (p *pipe) box(k box) any {
	if b, ok := p.boxes[k]; ok {
		return b
	}
	var v any = k.n
	if k.isInt {
		v = int(k.n)
	}
	if len(p.boxes) < maxBoxes {
		if p.boxes == nil {
			p.boxes = make(map[box]any)
		}
		p.boxes[k] = v
	}
	return v
}

func ttlMillis(d time.Duration) int64 { return max(d.Milliseconds(), 1) }

// run sends p's calls as one pipeline through client c and records each
// entry's result in p.res. It only talks to Redis; the results are applied
// by the lane. On a cluster client, calls that Redis refused because their
// slot is moving (TRYAGAIN, or a redirect go-redis did not follow) are sent
// again one lock a call, which go-redis routes and redirects (ASK, MOVED)
// key by key.
// sentBy returns when p was sent, for another goroutine than the one
// sending it: now when it has not been sent yet.
func (p *pipe) sentBy(now int64) int64 {
	if at := p.sentNs.Load(); at != 0 {
		return at
	}
	return now
}

// queued is how long p waited from its build by the scheduler to its
// send by its goroutine (a host that does not run the goroutine); for
// the Debug log, once p has been sent.
func (p *pipe) queued() time.Duration { return time.Duration(p.sentNs.Load() - p.built) }

// leftAtSend is how long the first of p's locks to expire had left when p
// was sent (negative: its key may have expired before); for the Debug
// log, once p has been sent.
func (p *pipe) leftAtSend() time.Duration { return time.Duration(p.expires - p.sentNs.Load()) }

func (p *pipe) run(ctx context.Context, t *table.Table, deadline time.Duration) {
	c, cluster := t.Client, t.Cluster
	if p.to != nil {
		c = p.to
	}
	ctx, cancel := context.WithTimeout(table.WithoutTracking(ctx), deadline)
	defer cancel()
	p.res = slices.Grow(p.res[:0], len(p.entries))[:len(p.entries)]
	p.sent = time.Now()
	p.sentNs.Store(t.Set().Since(p.sent))
	if p.toErr != nil {
		for i := range p.res {
			p.res[i] = table.Failed
		}
		p.err, p.failed = p.toErr, len(p.ends)
		return
	}
	for i := range p.ends {
		p.cmds = append(p.cmds, redis.NewCmd(ctx, p.args[i]...))
	}
	execErr := send(ctx, c, p.cmds)
	start := 0
	for i, cmd := range p.cmds {
		end := p.ends[i]
		err := cmd.Err()
		if err == nil && cmd.Val() == nil && execErr != nil {
			// go-redis leaves the commands untouched when it gets no
			// connection at all (pool timeout, cancelled context).
			err = execErr
		}
		if err != nil && cluster && end-start > 1 && slotMoving(err) {
			err = p.oneByOne(ctx, t, start, end)
		} else if err == nil {
			err = p.decode(cmd.Val(), start, end)
		}
		if err != nil {
			for j := start; j < end; j++ {
				p.res[j] = table.Failed
			}
			if p.err == nil {
				p.err = err
			}
			p.failed++
		}
		start = end
	}
}

// decode records the reply of the call for p.entries[start:end].
func (p *pipe) decode(reply any, start, end int) error {
	n := end - start
	if reply == int64(n) {
		for j := start; j < end; j++ {
			p.res[j] = table.Renewed
		}
		return nil
	}
	res, err := scripts.RenewResults(reply, n)
	if err != nil {
		return err
	}
	for j, r := range res {
		p.res[start+j] = int8(r)
	}
	return nil
}

// oneByOne renews p.entries[start:end] one lock a call, after their shared
// call was refused because their slot is being migrated: a call over
// several keys cannot be served while some of them have moved, but each
// key alone can, on the node that has it now.
func (p *pipe) oneByOne(ctx context.Context, t *table.Table, start, end int) error {
	c := t.Client // a cluster client: it routes each lock
	cmds := make([]*redis.Cmd, 0, end-start)
	for j, e := range p.entries[start:end] {
		ttl := p.ttls[start+j]
		var keys []string
		if e.Multi() {
			t.Lock()
			keys = t.KeysLocked(e)
			t.Unlock()
		}
		args := []any{"evalsha", lwscripts.RenewSHA1, max(len(keys), 1), e.KeyArg()}
		for _, k := range keys[min(1, len(keys)):] {
			args = append(args, k)
		}
		digest := len(e.Value) > table.DigestAbove
		var value any = e.ValueArg()
		if digest {
			t.Lock()
			value = t.DigestLocked(e)
			t.Unlock()
		}
		if len(keys) > 1 {
			args = append(args, scripts.Mode(scripts.ModeMulti, digest), len(keys), value, ttl)
		} else {
			args = append(args, scripts.Mode(scripts.ModeShared, digest), value, ttl)
		}
		cmds = append(cmds, redis.NewCmd(ctx, args...))
	}
	_ = send(ctx, c, cmds)
	var first error
	for i, cmd := range cmds {
		j := start + i
		err := cmd.Err()
		if err == nil {
			err = p.decode(cmd.Val(), j, j+1)
		}
		if err != nil {
			p.res[j] = table.Failed
			first = cmp.Or(first, err)
			p.failed++
		}
	}
	if first != nil && p.err == nil {
		p.err = first
	}
	return nil
}

// send sends cmds, renew script calls, through c: one call as a command
// of its own (from the client's pool: no pipeline needed), several as one
// pipeline. Calls the server answers NOSCRIPT (a restart, a failover or
// SCRIPT FLUSH emptied its script cache) are sent again with the script's
// source, which loads it; cmds[i] is then the new command. It returns the
// error of the whole: nil when every command got an answer.
func send(ctx context.Context, c redis.UniversalClient, cmds []*redis.Cmd) error {
	err := process(ctx, c, cmds)
	var again []*redis.Cmd
	for i, cmd := range cmds {
		// HasErrorPrefix allocates, even for no error.
		if cmd.Err() != nil && redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			args := cmd.Args()
			args[0], args[1] = "eval", lwscripts.RenewSource()
			cmds[i] = redis.NewCmd(ctx, args...)
			again = append(again, cmds[i])
		}
	}
	if len(again) > 0 {
		err = cmp.Or(process(ctx, c, again), err)
	}
	return err
}

func process(ctx context.Context, c redis.UniversalClient, cmds []*redis.Cmd) error {
	if len(cmds) == 1 {
		return c.Process(ctx, cmds[0])
	}
	pl := c.Pipeline()
	for _, cmd := range cmds {
		_ = pl.Process(ctx, cmd)
	}
	_, err := pl.Exec(ctx)
	return err
}

// slotMoving reports whether err says that a call's slot is being migrated
// or has moved.
func slotMoving(err error) bool {
	for _, prefix := range []string{"TRYAGAIN", "ASK", "MOVED", "CROSSSLOT"} {
		if redis.HasErrorPrefix(err, prefix) {
			return true
		}
	}
	return false
}

// isClosed reports whether err says the client was closed.
func isClosed(err error) bool { return errors.Is(err, redis.ErrClosed) }
