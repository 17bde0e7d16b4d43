package watchdog

import (
	"testing"
	"time"

	"github.com/lockwatch/lockwatch/registry"
)

func TestSlotOf(t *testing.T) {
	// Values from the Redis Cluster specification and CLUSTER KEYSLOT.
	for _, tc := range []struct {
		key  string
		want uint16
	}{
		{"123456789", 0x31C3 % slotCount},
		{"foo", 12182},
		{"bar", 5061},
		{"{user1000}.following", slotOf("user1000")},
		{"{user1000}.followers", slotOf("user1000")},
		{"foo{}{bar}", slotOf("foo{}{bar}")}, // empty tag: the whole key
		{"foo{{bar}}zap", slotOf("{bar")},
		{"", 0},
	} {
		if got := slotOf(tc.key); got != tc.want {
			t.Errorf("slotOf(%q) = %d, want %d", tc.key, got, tc.want)
		}
	}
	if slotOf("foo{}{bar}") == slotOf("bar") {
		t.Error("slotOf(foo{}{bar}) hashed the second tag; an empty first tag means the whole key")
	}
}

func TestSplitChunks(t *testing.T) {
	refs := make([]registry.Ref, 0, 12)
	for _, k := range []string{"{a}1", "{b}1", "{a}2", "{c}1", "{a}3", "{b}2", "{a}4", "{a}5", "{c}2", "{b}3"} {
		refs = append(refs, registry.Ref{Key: k, Value: "v", TTL: time.Second})
	}
	plain := splitChunks(refs, 4, false)
	if len(plain) != 3 || len(plain[0]) != 4 || len(plain[2]) != 2 {
		t.Errorf("splitChunks(10 refs, 4, plain) sizes = %v, want [4 4 2]", sizes(plain))
	}
	sortBySlot(refs)
	clustered := splitChunks(refs, 4, true)
	total := 0
	for _, ch := range clustered {
		total += len(ch)
		if len(ch) > 4 {
			t.Errorf("chunk of %d keys, want at most 4", len(ch))
		}
		for _, r := range ch[1:] {
			if slotOf(r.Key) != slotOf(ch[0].Key) {
				t.Errorf("chunk %v spans slots", ch)
			}
		}
	}
	if total != 10 || len(clustered) != 4 { // {a}: 4+1, {b}: 3, {c}: 2
		t.Errorf("splitChunks(clustered) sizes = %v, want 4 chunks over 10 refs", sizes(clustered))
	}
}

func sizes(chunks [][]registry.Ref) []int {
	out := make([]int, len(chunks))
	for i, c := range chunks {
		out[i] = len(c)
	}
	return out
}

func TestNeedsFast(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, tc := range []struct {
		ttl  time.Duration
		next time.Duration
		want bool
	}{
		{100 * time.Millisecond, 10 * time.Second, true},
		{8 * time.Second, 10 * time.Second, true},
		{15 * time.Second, 10 * time.Second, true},
		{30 * time.Second, 10 * time.Second, false},
		{time.Hour, time.Minute, false},
	} {
		if got := needsFast(tc.ttl, now, now.Add(tc.next)); got != tc.want {
			t.Errorf("needsFast(%v, next tick in %v) = %v, want %v", tc.ttl, tc.next, got, tc.want)
		}
	}
}
