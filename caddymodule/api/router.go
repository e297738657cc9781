package api

import (
	"net/http"
	"net/url"
	"strings"
)

// router finds a request's route in the route table. It matches as
// http.ServeMux matches the same patterns (TestRouterMatchesServeMux holds
// the two side by side): by method, HEAD also finding GET routes; segment
// by segment on the escaped path, each segment unescaped before it is
// compared; a literal segment before a {name} one, a {name} before a final
// {name...}, which takes the rest of the path. Unlike ServeMux it cleans
// nothing (ServeHTTP has) and allocates nothing for a path without
// escapes: every API call goes through it.
type router struct {
	byMethod map[string]*routeNode
}

// routeNode is one segment position of the routes of one method.
type routeNode struct {
	literal map[string]*routeNode
	wild    *routeNode // a {name} segment
	rest    *routeNode // a final {name...}
	route   *boundRoute
}

// boundRoute is a route with the names of its wildcards, in path order.
type boundRoute struct {
	route
	wildcards []string
}

// maxWildcards bounds the wildcards of one route ({node}, {storage},
// {volume...}; {node}, {vmid}, {snapname}).
const maxWildcards = 4

// pathValues are the values of a matched route's wildcards, unescaped.
type pathValues struct {
	names []string
	vals  [maxWildcards]string
	n     int
}

// get is the value of wildcard name, "" when the route has none.
func (v *pathValues) get(name string) string {
	for i, n := range v.names[:v.n] {
		if n == name {
			return v.vals[i]
		}
	}
	return ""
}

// newRouter builds the router over routes; a path is relative to
// /api2/json ("/" for the root).
func newRouter(routes []route) *router {
	rr := &router{byMethod: map[string]*routeNode{}}
	for _, rt := range routes {
		n := rr.byMethod[rt.method]
		if n == nil {
			n = &routeNode{}
			rr.byMethod[rt.method] = n
		}
		b := &boundRoute{route: rt, wildcards: pathWildcards(rt.path)}
		if len(b.wildcards) > maxWildcards {
			panic("route " + rt.path + " has more wildcards than maxWildcards")
		}
		for _, seg := range strings.Split(strings.Trim(rt.path, "/"), "/") {
			n = n.child(seg)
		}
		if n.route != nil {
			panic("route " + rt.method + " " + rt.path + " is listed twice")
		}
		n.route = b
	}
	return rr
}

// child is the node below n for a segment of a route's path.
func (n *routeNode) child(seg string) *routeNode {
	next := func(p **routeNode) *routeNode {
		if *p == nil {
			*p = &routeNode{}
		}
		return *p
	}
	switch {
	case seg == "":
		return n // the root: "/"
	case strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "...}"):
		return next(&n.rest)
	case strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}"):
		return next(&n.wild)
	}
	if n.literal == nil {
		n.literal = map[string]*routeNode{}
	}
	c := n.literal[seg]
	if c == nil {
		c = &routeNode{}
		n.literal[seg] = c
	}
	return c
}

// match finds the route of method and path (escaped, clean, relative to
// /api2/json: "/" for the root) and fills v with its wildcards' values.
func (rr *router) match(method, path string, v *pathValues) *boundRoute {
	if path == "/" {
		path = ""
	}
	if b := rr.byMethod[method].match(path, v); b != nil {
		return b
	}
	if method == http.MethodHead {
		return rr.byMethod[http.MethodGet].match(path, v)
	}
	return nil
}

func (n *routeNode) match(path string, v *pathValues) *boundRoute {
	if n == nil {
		return nil
	}
	if path == "" {
		if n.route != nil {
			v.names = n.route.wildcards
		}
		return n.route
	}
	seg, rest := firstSegment(path)
	if b := n.literal[seg].match(rest, v); b != nil {
		return b
	}
	if n.wild != nil {
		at := v.n
		v.vals[at] = seg
		v.n++
		if b := n.wild.match(rest, v); b != nil {
			return b
		}
		v.n = at
	}
	if n.rest != nil && n.rest.route != nil {
		v.vals[v.n] = unescapePath(path[1:])
		v.n++
		v.names = n.rest.route.wildcards
		return n.rest.route
	}
	return nil
}

// firstSegment splits "/seg/rest" into seg, unescaped, and "/rest".
func firstSegment(path string) (seg, rest string) {
	path = path[1:]
	i := strings.IndexByte(path, '/')
	if i < 0 {
		i = len(path)
	}
	return unescapePath(path[:i]), path[i:]
}

// unescapePath is s unescaped, as ServeMux unescapes segments: s itself
// when it holds no escape or a malformed one.
func unescapePath(s string) string {
	if strings.IndexByte(s, '%') < 0 {
		return s
	}
	u, err := url.PathUnescape(s)
	if err != nil {
		return s
	}
	return u
}
