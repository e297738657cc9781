package api

// AllowLoopbackURLs lets query-url-metadata and download-url reach the
// tests' servers on 127.0.0.1 (production never does) until the returned
// function is called.
func AllowLoopbackURLs() (restore func()) {
	allowLoopbackURLs.Store(true)
	return func() { allowLoopbackURLs.Store(false) }
}
