package ratelimit

import (
	"math"
	"net"
	"net/http"
	"strconv"
	"time"
)

// DraftRevision is the revision of the IETF RateLimit header fields draft
// that WithDraftHeaders follows: draft-ietf-httpapi-ratelimit-headers-12
// (2026-11-20), which defines the RateLimit-Policy and RateLimit fields as
// Structured Field lists of policy items.
const DraftRevision = "draft-ietf-httpapi-ratelimit-headers-12"

// A MiddlewareOption configures Middleware.
type MiddlewareOption func(*middleware)

type middleware struct {
	lim     *Limiter
	limit   Limit
	key     func(*http.Request) string
	policy  string
	draft   bool
	legacy  bool
	onError func(http.ResponseWriter, *http.Request, error)
}

// WithDraftHeaders sends the fields of DraftRevision on every answer,
// naming the policy policy (a Structured Field string, e.g. "default"):
//
//	RateLimit-Policy: "default";q=100;w=60
//	RateLimit: "default";r=42;t=17
//
// q is the limit's Burst (the quota a client may spend at once), w the
// Period in whole seconds (at least 1), r the remaining quota and t the
// seconds until the quota is whole again (rounded up). The legacy
// X-RateLimit-* fields are then left out.
func WithDraftHeaders(policy string) MiddlewareOption {
	return func(m *middleware) { m.draft, m.legacy, m.policy = true, false, policy }
}

// WithErrorHandler sets what answers a request whose decision failed (the
// store was unreachable). The default fails open: it logs nothing, serves
// the request and sends no rate-limit fields; a handler that answers
// 503 fails closed.
func WithErrorHandler(f func(w http.ResponseWriter, r *http.Request, err error)) MiddlewareOption {
	return func(m *middleware) { m.onError = f }
}

// KeyByRemoteIP is a key function: the client's IP address, from
// r.RemoteAddr (behind a proxy, write one that trusts its header).
func KeyByRemoteIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// Middleware limits the requests of each key (key(r); an empty key is not
// limited) to limit, with l. An allowed request goes to next; a denied one
// gets 429 Too Many Requests with Retry-After in whole seconds, rounded
// up. By default every answer carries the de facto X-RateLimit-Limit
// (Burst), X-RateLimit-Remaining and X-RateLimit-Reset (seconds until the
// quota is whole) fields; WithDraftHeaders sends the IETF draft's fields
// instead.
func Middleware(l *Limiter, limit Limit, key func(*http.Request) string, opts ...MiddlewareOption) func(http.Handler) http.Handler {
	m := &middleware{lim: l, limit: limit, key: key, legacy: true}
	for _, o := range opts {
		o(m)
	}
	m.policy = sfString(m.policy)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			k := m.key(r)
			if k == "" {
				next.ServeHTTP(w, r)
				return
			}
			res, err := m.lim.Allow(r.Context(), k, m.limit)
			if err != nil {
				if m.onError != nil {
					m.onError(w, r, err)
					return
				}
				next.ServeHTTP(w, r)
				return
			}
			m.writeFields(w.Header(), res)
			if res.Allowed == 0 {
				w.Header().Set("Retry-After", strconv.FormatInt(ceilSeconds(res.RetryAfter), 10))
				http.Error(w, http.StatusText(http.StatusTooManyRequests), http.StatusTooManyRequests)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

func (m *middleware) writeFields(h http.Header, res Result) {
	reset := strconv.FormatInt(ceilSeconds(res.ResetAfter), 10)
	remaining := strconv.Itoa(res.Remaining)
	if m.legacy {
		h.Set("X-RateLimit-Limit", strconv.Itoa(m.limit.Burst))
		h.Set("X-RateLimit-Remaining", remaining)
		h.Set("X-RateLimit-Reset", reset)
	}
	if m.draft {
		name := m.policy
		window := max(ceilSeconds(m.limit.Period), 1)
		h.Set("RateLimit-Policy", name+";q="+strconv.Itoa(m.limit.Burst)+";w="+strconv.FormatInt(window, 10))
		h.Set("RateLimit", name+";r="+remaining+";t="+reset)
	}
}

// ceilSeconds is d in whole seconds, rounded up (0 for d <= 0).
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64(math.Ceil(d.Seconds()))
}

// sfString is s as a Structured Field string (RFC 8941 3.3.3): quoted,
// with '"' and '\\' escaped, and bytes outside printable ASCII dropped
// (the format has no escape for them).
func sfString(s string) string {
	b := make([]byte, 0, len(s)+2)
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c >= 0x20 && c <= 0x7e:
			b = append(b, c)
		}
	}
	return string(append(b, '"'))
}
