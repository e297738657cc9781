package translate

import "testing"

func TestTaskLogEnd(t *testing.T) {
	tests := []struct {
		exit, want string
	}{
		{ExitOK, "TASK OK"},
		{"WARNINGS: 2", "TASK WARNINGS: 2"},
		{ExitWarnings(0), "TASK WARNINGS: 0"},
		{"WARNINGS: x", "TASK ERROR: WARNINGS: x"},
		{"WARNINGS: ", "TASK ERROR: WARNINGS:"},
		{"VM 100 not running", "TASK ERROR: VM 100 not running"},
		{"command failed\n", "TASK ERROR: command failed"},
		{"line one\nline two\r\nthree", "TASK ERROR: line one line two three"},
		{"", "TASK ERROR: unknown error"},
		{" \n", "TASK ERROR: unknown error"},
		{"ok", "TASK ERROR: ok"},
	}
	for _, tt := range tests {
		if got := TaskLogEnd(tt.exit); got != tt.want {
			t.Errorf("TaskLogEnd(%q) = %q, want %q", tt.exit, got, tt.want)
		}
	}
}

func TestExitWarnings(t *testing.T) {
	tests := []struct {
		n    int
		want string
	}{
		{0, "WARNINGS: 0"},
		{1, "WARNINGS: 1"},
		{17, "WARNINGS: 17"},
	}
	for _, tt := range tests {
		if got := ExitWarnings(tt.n); got != tt.want {
			t.Errorf("ExitWarnings(%d) = %q, want %q", tt.n, got, tt.want)
		}
	}
}

func TestExitIsError(t *testing.T) {
	tests := []struct {
		exit string
		want bool
	}{
		{"OK", false},
		{"WARNINGS: 3", false},
		{"WARNINGS: ", true},
		{"WARNINGS: 3x", true},
		{"ok", true},
		{"", true},
		{"unexpected status", true},
		{"VM 100 not running", true},
	}
	for _, tt := range tests {
		if got := ExitIsError(tt.exit); got != tt.want {
			t.Errorf("ExitIsError(%q) = %v, want %v", tt.exit, got, tt.want)
		}
	}
}

func TestTaskTypes(t *testing.T) {
	// Task types must be valid UPID type fields.
	for _, typ := range []string{
		TaskCreate, TaskRestore, TaskStart, TaskStop, TaskShutdown, TaskReboot, TaskReset,
		TaskSuspend, TaskPause, TaskResume, TaskDestroy, TaskConfig, TaskClone, TaskTemplate,
		TaskResize, TaskMove, TaskMigrate, TaskSnapshot, TaskDelSnapshot, TaskRollback,
		TaskHAStart, TaskHAStop, TaskVNCProxy,
	} {
		u := UPID{Node: "pve", Type: typ, ID: "100", User: "root@pam"}
		if _, err := ParseUPID(u.String()); err != nil {
			t.Errorf("task type %q does not round-trip: %v", typ, err)
		}
	}
}
