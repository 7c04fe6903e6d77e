package ratelimit

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/shmarena/shmarena"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func byHeader(r *http.Request) string { return r.Header.Get("X-Client") }

func serve(h http.Handler, client string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("GET", "/", nil)
	req.Header.Set("X-Client", client)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestMiddlewareLegacyFieldsAnd429(t *testing.T) {
	kv, _ := testStore(t)
	l := NewLimiter(kv)
	// A clock that stands still: on the real one, a second between the
	// first request and the third (a busy machine) makes Retry-After 29.
	now := time.Now().UnixNano()
	fakeClock(l, &now)
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) })
	h := Middleware(l, PerMinute(2), byHeader)(ok)

	rec := serve(h, "alice")
	assert.Equal(t, 200, rec.Code)
	assert.Equal(t, "2", rec.Header().Get("X-RateLimit-Limit"))
	assert.Equal(t, "1", rec.Header().Get("X-RateLimit-Remaining"))
	assert.Equal(t, "30", rec.Header().Get("X-RateLimit-Reset"))
	assert.Empty(t, rec.Header().Get("RateLimit"))
	assert.Equal(t, 200, serve(h, "alice").Code)

	rec = serve(h, "alice")
	assert.Equal(t, http.StatusTooManyRequests, rec.Code)
	assert.Equal(t, "30", rec.Header().Get("Retry-After"))
	assert.Equal(t, "0", rec.Header().Get("X-RateLimit-Remaining"))

	assert.Equal(t, 200, serve(h, "bob").Code, "keys are separate")
	assert.Equal(t, 200, serve(h, "").Code, "an empty key is not limited")
}

func TestMiddlewareDraftFields(t *testing.T) {
	kv, _ := testStore(t)
	l := NewLimiter(kv)
	h := Middleware(l, Limit{Rate: 10, Burst: 5, Period: 500 * time.Millisecond}, byHeader,
		WithDraftHeaders(`per "client"`))(http.NotFoundHandler())
	rec := serve(h, "alice")
	assert.Equal(t, `"per \"client\"";q=5;w=1`, rec.Header().Get("RateLimit-Policy"))
	assert.Equal(t, `"per \"client\"";r=4;t=1`, rec.Header().Get("RateLimit"))
	assert.Empty(t, rec.Header().Get("X-RateLimit-Limit"))
}

// failingStore refuses every call, as an unreachable network store would.
type failingStore struct{ shmarena.KeyValue }

var errDown = errors.New("store down")

func (failingStore) AppendLoad(context.Context, []byte, string) ([]byte, bool, error) {
	return nil, false, errDown
}

func TestMiddlewareStoreErrors(t *testing.T) {
	l := NewLimiter(failingStore{})
	_, err := l.Allow(context.Background(), "k", PerSecond(1))
	require.ErrorIs(t, err, errDown)

	h := Middleware(l, PerSecond(1), byHeader)(http.NotFoundHandler())
	assert.Equal(t, 404, serve(h, "alice").Code, "fails open by default")

	closed := Middleware(l, PerSecond(1), byHeader, WithErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
	}))(http.NotFoundHandler())
	assert.Equal(t, 503, serve(closed, "alice").Code)
}

func TestKeyByRemoteIP(t *testing.T) {
	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "192.0.2.7:1234"
	assert.Equal(t, "192.0.2.7", KeyByRemoteIP(req))
	req.RemoteAddr = "odd"
	assert.Equal(t, "odd", KeyByRemoteIP(req))
}
