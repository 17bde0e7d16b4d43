package watchdog

import (
	"encoding/base64"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/lockwatch/lockwatch/internal/table"
)

// lockView is what the debug page shows of one tracked lock: never its
// value, which is the holder's token.
//
// Keys are shown as [keyViewOf] says: each cut to [HandlerMaxKeyBytes],
// escaped when they would not read as they are, with their bytes in base64
// beside them then; a lock over several keys lists its first
// [HandlerMaxKeys].
type lockView struct {
	Key          string `json:"key"`
	KeyB64       string `json:"key_b64,omitempty"`       // the bytes of Key, when it is escaped
	KeyBytes     int    `json:"key_bytes,omitempty"`     // the key's length, when it is truncated
	KeyTruncated bool   `json:"key_truncated,omitempty"` // Key is only the key's first bytes

	// For a lock over several keys only.
	Keys          []string `json:"keys,omitempty"`           // its first keys, shown as Key is
	KeysB64       []string `json:"keys_b64,omitempty"`       // the bytes of each of Keys, when one is escaped
	KeysBytes     []int    `json:"keys_bytes,omitempty"`     // the length of each of Keys, when one is truncated
	KeysTotal     int      `json:"keys_total,omitempty"`     // how many keys the lock has
	KeysTruncated bool     `json:"keys_truncated,omitempty"` // a key is truncated, or not listed

	Endpoint           string    `json:"endpoint"` // the client's address, or the cluster node's
	Source             string    `json:"source"`   // the adapter: redislock, redsync
	TTL                string    `json:"ttl"`
	TTLMillis          int64     `json:"ttl_ms"`
	HeldFor            string    `json:"held_for"`
	HeldForMillis      int64     `json:"held_for_ms"`
	ObtainedAt         time.Time `json:"obtained_at"`
	ConfirmedAt        time.Time `json:"confirmed_at"`
	ConfirmedAgo       string    `json:"confirmed_ago"`
	ConfirmedAgoMillis int64     `json:"confirmed_ago_ms"`
	Renewals           int64     `json:"renewals"`
	FastLane           bool      `json:"fast_lane"` // renewed between ticks (or waiting for a retry)
	Retrying           bool      `json:"retrying"`  // its last renewal failed
	InFlight           bool      `json:"in_flight"` // a renewal is on its way
	CopiesHeld         int       `json:"copies_held,omitempty"`
	Quorum             int       `json:"quorum,omitempty"` // for a lock over several servers (Redlock)
	Servers            int       `json:"servers,omitempty"`

	// For the HTML page only.
	KeyShown  keyView   `json:"-"`
	KeysShown []keyView `json:"-"`
}

// keyView is one key as the page shows it.
type keyView struct {
	Text      string // the bytes shown, as they are or escaped
	Bytes     int    // the key's length
	Escaped   bool   // Text is the bytes shown, escaped
	Truncated bool   // only the key's first bytes are shown

	shown string // the bytes shown
}

// keyViewOf is k on the page. At most its first [HandlerMaxKeyBytes]
// bytes are shown, cut where a UTF-8 character starts (up to three bytes
// sooner). When those bytes are not UTF-8, or hold a character that does
// not print ([strconv.IsPrint] is false: a control character, a bidi
// override, a zero-width space...), they are shown escaped as
// [strconv.Quote] escapes them, without the quotes: the keys
// "bin:\x00\xff:end" and "bin:\x00\xfe:end" read bin:\x00\xff:end and
// bin:\x00\xfe:end, where JSON's and HTML's own escaping would show both
// alike, with U+FFFD for the byte that differs.
func keyViewOf(k string) keyView {
	shown := k
	if len(k) > HandlerMaxKeyBytes {
		n := HandlerMaxKeyBytes
		for i := n; i > n-utf8.UTFMax; i-- {
			if utf8.RuneStart(k[i]) {
				n = i
				break
			}
		}
		shown = k[:n]
	}
	v := keyView{Text: shown, Bytes: len(k), Truncated: len(shown) < len(k), shown: shown}
	if !utf8.ValidString(shown) || strings.ContainsFunc(shown, func(r rune) bool { return !strconv.IsPrint(r) }) {
		q := strconv.Quote(shown)
		v.Text, v.Escaped = q[1:len(q)-1], true
	}
	return v
}

// b64 is the bytes k shows, in standard base64 with padding.
func (k *keyView) b64() string { return base64.StdEncoding.EncodeToString([]byte(k.shown)) }

// lockSnap is a tracked lock as copied with its table locked: the raw
// fields only (no value), formatted later by view.
type lockSnap struct {
	key       string
	keys      []string // the table's slice, never changed once stored
	endpoint  string
	source    uint8
	ttl       time.Duration
	obtained  int64
	confirmed int64
	renewals  uint32
	flags     table.Flags

	held, quorum, servers int
}

// lockSnaps copies every tracked lock, client by client in Watch order. It
// holds a table's lock only while it copies a few thousand entries (see
// [table.Table.Walk]), formats nothing and makes no client.
func (w *Watchdog) lockSnaps() []lockSnap {
	var out []lockSnap
	var clients map[*table.Table]*client
	if m := w.view.Load(); m != nil {
		clients = *m
	}
	for _, t := range w.set.Tables() {
		c := clients[t] // nil for a client the watchdog has not adopted yet
		name := endpointName(t.Client)
		start := len(out)
		n := t.Len() // grown before, not while, the table is locked
		out = slices.Grow(out, n)
		entries := make([]*table.Entry, 0, n)
		t.Walk(func(e *table.Entry) bool {
			s := lockSnap{
				key:       e.Key,
				keys:      t.KeysLocked(e),
				endpoint:  name,
				source:    e.Source(),
				ttl:       e.TTL,
				obtained:  e.Obtained,
				confirmed: e.Confirmed,
				renewals:  e.Renewals,
				flags:     e.State(),
			}
			if c != nil {
				if l := c.owner(e); l != nil {
					s.endpoint = l.name
				}
			}
			out = append(out, s)
			entries = append(entries, e)
			return false
		}, nil)
		// Groups are read after the table lock is let go.
		for j, e := range entries {
			if g := w.set.GroupOf(e); g != nil {
				s := &out[start+j]
				s.held, s.quorum, s.servers = w.set.GroupState(g)
			}
		}
	}
	return out
}

// lockViewOf formats s at now.
func (w *Watchdog) lockViewOf(s *lockSnap, now time.Time) lockView {
	obtained, confirmed := w.set.At(s.obtained), w.set.At(s.confirmed)
	held, ago := now.Sub(obtained), now.Sub(confirmed)
	v := lockView{
		Endpoint:           s.endpoint,
		Source:             w.set.Names[s.source],
		TTL:                s.ttl.String(),
		TTLMillis:          s.ttl.Milliseconds(),
		HeldFor:            held.Round(time.Millisecond).String(),
		HeldForMillis:      held.Milliseconds(),
		ObtainedAt:         obtained,
		ConfirmedAt:        confirmed,
		ConfirmedAgo:       ago.Round(time.Millisecond).String(),
		ConfirmedAgoMillis: ago.Milliseconds(),
		Renewals:           int64(s.renewals),
		FastLane:           s.flags&(table.Queued|table.Fresh) != 0,
		Retrying:           s.flags&table.Retry != 0,
		InFlight:           s.flags&table.InFlight != 0,
		CopiesHeld:         s.held,
		Quorum:             s.quorum,
		Servers:            s.servers,
	}
	k := keyViewOf(s.key)
	v.Key, v.KeyTruncated, v.KeyShown = k.Text, k.Truncated, k
	if k.Escaped {
		v.KeyB64 = k.b64()
	}
	if k.Truncated {
		v.KeyBytes = k.Bytes
	}
	if len(s.keys) == 0 {
		return v
	}
	n := min(len(s.keys), HandlerMaxKeys)
	v.KeysTotal, v.KeysTruncated = len(s.keys), n < len(s.keys)
	v.Keys, v.KeysShown = make([]string, n), make([]keyView, n)
	var escaped bool
	for i, key := range s.keys[:n] {
		k := keyViewOf(key)
		v.Keys[i], v.KeysShown[i] = k.Text, k
		escaped = escaped || k.Escaped
		v.KeysTruncated = v.KeysTruncated || k.Truncated
	}
	if escaped {
		v.KeysB64 = make([]string, n)
		for i := range v.KeysShown {
			v.KeysB64[i] = v.KeysShown[i].b64()
		}
	}
	if slices.ContainsFunc(v.KeysShown, func(k keyView) bool { return k.Truncated }) {
		v.KeysBytes = make([]int, n)
		for i, k := range v.KeysShown {
			v.KeysBytes[i] = k.Bytes
		}
	}
	return v
}
