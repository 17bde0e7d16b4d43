package scripts

import "fmt"

// Layouts of the renew script's arguments, its first ARGV.
const (
	// ModeShared: one key per lock; the values, then one TTL for every lock.
	ModeShared = "s"
	// ModePerLock: one key per lock; the values, then one TTL per lock.
	ModePerLock = "p"
	// ModeMulti: locks over one or more keys (consecutive in KEYS); per lock
	// its number of keys, its value and its TTL.
	ModeMulti = "m"
)

// Mode returns the layout mode (ModeShared, ModePerLock or ModeMulti) for
// a call whose values are digests (digest true: the SHA1 in hex of each
// lock's value, as redis.sha1hex computes it) or the values themselves.
func Mode(mode string, digest bool) string {
	if !digest {
		return mode
	}
	switch mode {
	case ModeShared:
		return "S"
	case ModePerLock:
		return "P"
	case ModeMulti:
		return "M"
	}
	return mode
}

// Per-lock results of the renew script.
const (
	// Renewed: the key held our value and its expiry was set to the TTL.
	Renewed int64 = 1
	// Gone: a key of the lock does not exist (deleted or expired).
	Gone int64 = 0
	// Taken: a key of the lock holds another value, or is not a string.
	Taken int64 = -1
)

// RenewResults decodes the reply of a renew script call for n locks into one
// result per lock ([Renewed], [Gone] or [Taken]).
func RenewResults(reply any, n int) ([]int64, error) {
	switch r := reply.(type) {
	case int64:
		if r != int64(n) {
			return nil, fmt.Errorf("scripts: renew answered %d for %d keys", r, n)
		}
		out := make([]int64, n)
		for i := range out {
			out[i] = Renewed
		}
		return out, nil
	case []any:
		if len(r) != n {
			return nil, fmt.Errorf("scripts: renew answered %d results for %d keys", len(r), n)
		}
		out := make([]int64, n)
		for i, v := range r {
			x, ok := v.(int64)
			if !ok || x < Taken || x > Renewed {
				return nil, fmt.Errorf("scripts: renew answered %v (%T) for key %d, want 1, 0 or -1", v, v, i+1)
			}
			out[i] = x
		}
		return out, nil
	}
	return nil, fmt.Errorf("scripts: renew answered %v (%T), want an integer or an array", reply, reply)
}
