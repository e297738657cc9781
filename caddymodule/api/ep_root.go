package api

// pveVersion is the PVE release reported to clients: 8.x, because 9.x
// switches Telmate to HA rules this server does not have.
const (
	pveVersion = "8.4.1"
	pveRelease = "8.4"
	pveRepoID  = "c4dd1e9b"
)

func subdirs(names ...string) []map[string]string {
	out := make([]map[string]string, len(names))
	for i, n := range names {
		out[i] = map[string]string{"subdir": n}
	}
	return out
}

func (h *APIHandler) getRoot(q *request) (any, *apiError) {
	return subdirs("access", "cluster", "nodes", "pools", "storage", "version"), nil
}

func (h *APIHandler) getVersion(q *request) (any, *apiError) {
	return map[string]any{"version": pveVersion, "release": pveRelease, "repoid": pveRepoID, "console": "xtermjs"}, nil
}
