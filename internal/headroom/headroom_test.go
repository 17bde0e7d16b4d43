package headroom

import (
	"math"
	"testing"
)

func TestHeadroom(t *testing.T) {
	for _, tc := range []struct {
		name  string
		notes []float64
		want  float64
		ok    bool
	}{
		{"none", nil, 0, false},
		{"one", []float64{0.5}, 0.5, true},
		{"least", []float64{0.9, 0.4, 0.7}, 0.4, true},
		{"zero", []float64{0.9, 0}, 0, true},
		{"negative", []float64{0.2, -0.1}, -0.1, true},
		{"NaN ignored", []float64{math.NaN(), 0.8, math.NaN()}, 0.8, true},
		{"only NaN", []float64{math.NaN()}, 0, false},
	} {
		var h Least
		for _, v := range tc.notes {
			h.Note(v)
		}
		if got, ok := h.Take(); got != tc.want || ok != tc.ok {
			t.Errorf("%s: Take() = %v, %v, want %v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
		if got, ok := h.Take(); ok {
			t.Errorf("%s: second Take() = %v, true, want false: take resets", tc.name, got)
		}
	}
}
