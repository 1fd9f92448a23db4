package schema

import _ "embed"

// RolesSQL creates the least-privilege roles baton_worker and baton_loader
// with exactly the grants the worker and the loader need. Run it as the
// database owner after migrating.
//
//go:embed roles.sql
var RolesSQL string
