package registry

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/internal/table"
)

// hook feeds a registry table from the commands of one watched client. It
// calls next, never changes a command, its result or its error, and never
// calls Redis.
type hook struct {
	r *Registry
	t *table.Table
}

var _ redis.Hook = (*hook)(nil)

// WithoutTracking returns a context whose commands the registry ignores. The
// watchdog sends its renewals with it; an application may use it for
// commands that look like lock commands but are not.
func WithoutTracking(ctx context.Context) context.Context {
	untrackedByApp.Store(true)
	return withoutTracking(ctx)
}

// untrackedByApp is set once the application has called WithoutTracking.
// Until then, no command sent on its own (not in a pipeline) can carry the
// mark, and the hook does not look for it: a context's values are found by
// a walk up its parents, which on a request's context are many. The
// watchdog marks its renewals with withoutTracking, which leaves the flag
// alone; it sends them in pipelines, whose mark is always looked for, and
// the lock scripts it may send on their own (a renewal redirected in a
// cluster) are its own script, which no adapter recognises.
var untrackedByApp atomic.Bool

func withoutTracking(ctx context.Context) context.Context { return table.WithoutTracking(ctx) }

func untracked(ctx context.Context) bool { return table.Untracked(ctx) }

func (h *hook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		name := lockCommandName(cmd.Args())
		if name != "" && untrackedByApp.Load() && untracked(ctx) {
			name = ""
		}
		var marked table.Marked
		if name == "eval" || name == "evalsha" {
			marked = h.mark(ctx, name, cmd)
		}
		var sent int64
		if name != "" {
			sent = h.t.Set().Now() // a lock is confirmed as of when its command was sent
		}
		err := next(ctx, cmd)
		if name != "" {
			h.observe(ctx, name, cmd, err, sent)
		}
		h.t.Unmark(marked)
		return err
	}
}

func (h *hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if untracked(ctx) { // the watchdog's renewals, say
			return next(ctx, cmds)
		}
		var marked []table.Marked
		for _, cmd := range cmds {
			if name := lockCommandName(cmd.Args()); name == "eval" || name == "evalsha" {
				if m := h.mark(ctx, name, cmd); m.Entry() != nil {
					marked = append(marked, m)
				}
			}
		}
		sent := h.t.Set().Now()
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if name := lockCommandName(cmd.Args()); name != "" {
				h.observe(ctx, name, cmd, cmd.Err(), sent)
			}
		}
		for _, m := range marked {
			h.t.Unmark(m)
		}
		return err
	}
}

// mark tells the table that a lock script of a tracked lock is about to
// be sent by its owner (the command carries the lock's value), before it
// is: a renewal of the lock in flight is waited for, as long as ctx allows
// (so that the holder's refresh or release reaches Redis after it), and
// until the answer the watchdog neither renews the lock nor reports it
// lost. A command with another value (another goroutine trying to obtain
// the key) marks nothing. The caller has ruled out a context marked by
// WithoutTracking.
func (h *hook) mark(ctx context.Context, name string, cmd redis.Cmder) table.Marked {
	c := Command{Name: name, Args: cmd.Args(), Pending: true}
	for _, i := range h.r.askedAbout(name) {
		if act := classify(h.r.adapters[i], &c); act.Op != OpNone {
			if act.Key == "" {
				return table.Marked{}
			}
			ttl := time.Duration(0)
			if act.Op == OpRefresh {
				ttl = act.TTL
			}
			return h.t.Mark(ctx, act.Key, act.Value, ttl)
		}
	}
	return table.Marked{}
}

// lockCommandName returns "set" for a SET that carries NX (a lock is never
// acquired without it), "eval" or "evalsha", and "" for any other command.
// It does not allocate.
func lockCommandName(args []any) string {
	if len(args) < 3 {
		return ""
	}
	name, ok := args[0].(string)
	if !ok {
		return ""
	}
	switch {
	case foldEqual(name, "set"):
		if hasNX(args[3:]) {
			return "set"
		}
	case foldEqual(name, "eval"):
		return "eval"
	case foldEqual(name, "evalsha"):
		return "evalsha"
	}
	return ""
}

// hasNX reports whether a SET's options include NX. go-redis's SetNX
// writes it last, which is looked at first.
func hasNX(opts []any) bool {
	if len(opts) > 0 {
		if s, ok := opts[len(opts)-1].(string); ok && s == "nx" {
			return true
		}
	}
	for _, o := range opts {
		if s, ok := o.(string); ok && foldEqual(s, "nx") {
			return true
		}
	}
	return false
}

// foldEqual reports whether s is word, a lower-case ASCII word, in any
// case. Redis compares command names and options in ASCII only, and so
// does foldEqual: unlike strings.EqualFold it needs no call and no Unicode
// tables (a string of word's length cannot hold a multi-byte rune that
// folds to an ASCII letter anyway).
func foldEqual(s, word string) bool {
	if s == word { // as go-redis spells them
		return true
	}
	if len(s) != len(word) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i]|0x20 != word[i] { // 'A'..'Z' | 0x20 is 'a'..'z'; word holds letters only
			return false
		}
	}
	return true
}

// observe asks the adapters about one lock-shaped command, sent at sent
// (ns since the table set's epoch). A panicking
// adapter is contained: the command's result is never affected. Adapters
// decide from the error too: an obtain or refresh counts only with a reply,
// while a release untracks even when it failed, so that nothing the holder
// tried to release is ever renewed. The caller has ruled out a context
// marked by WithoutTracking.
func (h *hook) observe(ctx context.Context, name string, cmd redis.Cmder, err error, sent int64) {
	defer func() { _ = recover() }() // an adapter's or a subscriber's panic: never the application's
	c := Command{Name: name, Args: cmd.Args(), Reply: replyOf(cmd), Err: err}
	if name == "set" {
		c.Deadline, _ = ctx.Deadline()
	}
	asked := h.r.askedAbout(name)
	if len(asked) == 1 {
		// With no other adapter to ask, the adapter's panic needs no
		// containing of its own: it ends the command's classification here,
		// as classify would.
		i := asked[0]
		if act := h.r.adapters[i].Classify(c); act.Op != OpNone {
			h.r.apply(h.t, i, &act, sent)
		}
		return
	}
	for _, i := range asked {
		if act := classify(h.r.adapters[i], &c); act.Op != OpNone {
			h.r.apply(h.t, i, &act, sent)
			return
		}
	}
}

// askedAbout returns the indices of the adapters to ask about commands
// called name, one of lockCommandName's names.
func (r *Registry) askedAbout(name string) []int {
	switch name {
	case kinds[0]:
		return r.asked[0]
	case kinds[1]:
		return r.asked[1]
	}
	return r.asked[2]
}

// classify asks one adapter, containing its panic: a panicking adapter
// recognises nothing, and the next adapter is still asked.
//
// c is passed by pointer, and copied only into the adapter's call: the
// hook runs on the goroutine that sent the command, which redsync starts
// for each acquire with a small stack, and every frame of the hook's path
// counts against it.
func classify(a Adapter, c *Command) (act Action) {
	defer func() {
		if recover() != nil {
			act = Action{}
		}
	}()
	return a.Classify(*c)
}

func replyOf(cmd redis.Cmder) any {
	switch c := cmd.(type) {
	case *redis.Cmd:
		return c.Val()
	case *redis.BoolCmd:
		return c.Val()
	case *redis.StatusCmd:
		return c.Val()
	}
	return nil
}
