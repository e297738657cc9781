package translate

// paramError is a validation failure whose text is exactly what PVE reports
// for the offending parameter, so the API layer can forward it unchanged
// (clients match on PVE's wording). kind lets callers classify the failure
// with errors.Is without parsing the text.
type paramError struct {
	kind error
	msg  string
}

// Error returns PVE's wording for the failure.
func (e *paramError) Error() string { return e.msg }

// Unwrap exposes the sentinel that classifies the failure.
func (e *paramError) Unwrap() error { return e.kind }

// newParamError builds a paramError of the given kind.
func newParamError(kind error, msg string) error {
	return &paramError{kind: kind, msg: msg}
}
