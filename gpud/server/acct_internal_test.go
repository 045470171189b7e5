package server

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/accounting"
	"github.com/gpud/gpud/gpud/controller"
	"github.com/gpud/gpud/gpud/spec"
)

func TestScopeToCaller(t *testing.T) {
	t.Parallel()
	root := controller.Caller{UID: 0, User: "root", Known: true}
	alice := controller.Caller{UID: 1000, User: "alice", Known: true}
	tests := []struct {
		name      string
		who       controller.Caller
		users     []string
		wantUsers []string
		wantErr   string
	}{
		{name: "root sees everyone", who: root, wantUsers: nil},
		{name: "root filters on anyone", who: root, users: []string{"bob"}, wantUsers: []string{"bob"}},
		{name: "user gets their own by default", who: alice, wantUsers: []string{"alice"}},
		{name: "user filters on themselves", who: alice, users: []string{"alice"}, wantUsers: []string{"alice"}},
		{name: "user asks for another user", who: alice, users: []string{"alice", "bob"},
			wantErr: "user alice may see only their own jobs, not those of user bob; ask root for other users' accounting"},
		{name: "unidentified caller", who: controller.Caller{}, wantErr: "job accounting needs an identified caller; connect over the controller's unix socket"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := accounting.Filter{Users: tc.users}
			err := scopeToCaller(tc.who, &f)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr || !errors.Is(err, spec.ErrPermissionDenied) {
					t.Fatalf("err = %v; want permission denied %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantUsers, f.Users); diff != "" {
				t.Errorf("users (-want +got):\n%s", diff)
			}
		})
	}
}
