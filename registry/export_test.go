package registry

import "github.com/redis/go-redis/v9"

// Clients returns the clients r watches, for the external tests.
func Clients(r *Registry) []redis.UniversalClient {
	var out []redis.UniversalClient
	for _, t := range r.set.Tables() {
		out = append(out, t.Client)
	}
	return out
}

// Adapters returns r's adapters, for the external tests.
func Adapters(r *Registry) []Adapter { return append([]Adapter(nil), r.adapters...) }
