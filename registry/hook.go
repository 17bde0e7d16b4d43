package registry

import (
	"context"
	"strings"

	"github.com/redis/go-redis/v9"
)

// hook feeds a registry table from the commands of one watched client. It
// calls next first, never changes a command, its result or its error, and
// never calls Redis.
type hook struct {
	r *Registry
	t *table
}

var _ redis.Hook = (*hook)(nil)

type untrackedKey struct{}

// WithoutTracking returns a context whose commands the registry ignores. The
// watchdog sends its renewals with it; an application may use it for
// commands that look like lock commands but are not.
func WithoutTracking(ctx context.Context) context.Context {
	return context.WithValue(ctx, untrackedKey{}, true)
}

func (h *hook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		name := lockCommandName(cmd.Args())
		var rel releasing
		if name == "eval" || name == "evalsha" {
			rel = h.markRelease(ctx, name, cmd)
		}
		err := next(ctx, cmd)
		if name != "" {
			h.observe(ctx, name, cmd, err)
		}
		h.t.unmark(rel)
		return err
	}
}

func (h *hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var rels []releasing
		for _, cmd := range cmds {
			if name := lockCommandName(cmd.Args()); name == "eval" || name == "evalsha" {
				if rel := h.markRelease(ctx, name, cmd); rel.key != "" {
					rels = append(rels, rel)
				}
			}
		}
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if name := lockCommandName(cmd.Args()); name != "" {
				h.observe(ctx, name, cmd, cmd.Err())
			}
		}
		for _, rel := range rels {
			h.t.unmark(rel)
		}
		return err
	}
}

// releasing names a lock whose release is on its way to Redis.
type releasing struct{ key, value string }

// markRelease marks the lock a release script is about to release, before
// it is sent: from then until the hook has seen the answer, the watchdog
// does not report the lock lost when its renewal finds the key gone or
// taken (the release itself deleted it, and will untrack it).
func (h *hook) markRelease(ctx context.Context, name string, cmd redis.Cmder) releasing {
	if ctx != nil && ctx.Value(untrackedKey{}) != nil {
		return releasing{}
	}
	c := Command{Name: name, Args: cmd.Args()}
	for _, a := range h.r.adapters {
		if act := classify(a, c); act.Op != OpNone {
			if act.Op != OpRelease || act.Key == "" {
				return releasing{}
			}
			rel := releasing{act.Key, act.Value}
			h.t.mu.Lock()
			h.t.releasing[rel]++
			h.t.mu.Unlock()
			return rel
		}
	}
	return releasing{}
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
	switch len(name) {
	case 3:
		if strings.EqualFold(name, "set") && hasNX(args[3:]) {
			return "set"
		}
	case 4:
		if strings.EqualFold(name, "eval") {
			return "eval"
		}
	case 7:
		if strings.EqualFold(name, "evalsha") {
			return "evalsha"
		}
	}
	return ""
}

// hasNX reports whether a SET's options include NX.
func hasNX(opts []any) bool {
	for _, o := range opts {
		if s, ok := o.(string); ok && len(s) == 2 && strings.EqualFold(s, "nx") {
			return true
		}
	}
	return false
}

// observe asks the adapters about one lock-shaped command. A panicking
// adapter is contained: the command's result is never affected. Adapters
// decide from the error too: an obtain or refresh counts only with a reply,
// while a release untracks even when it failed, so that nothing the holder
// tried to release is ever renewed.
func (h *hook) observe(ctx context.Context, name string, cmd redis.Cmder, err error) {
	if ctx != nil && ctx.Value(untrackedKey{}) != nil {
		return
	}
	defer func() { _ = recover() }() // a subscriber's panic, say: never the application's
	c := Command{Name: name, Args: cmd.Args(), Reply: replyOf(cmd), Err: err}
	for i, a := range h.r.adapters {
		if act := classify(a, c); act.Op != OpNone {
			h.r.apply(h.t, i, act)
			return
		}
	}
}

// classify asks one adapter, containing its panic: a panicking adapter
// recognises nothing, and the next adapter is still asked.
func classify(a Adapter, c Command) (act Action) {
	defer func() {
		if recover() != nil {
			act = Action{}
		}
	}()
	return a.Classify(c)
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
