package schema

import _ "embed"

// RolesSQL creates the least-privilege roles baton_worker and baton_loader
// with exactly the grants the worker and the loader need. It names baton's
// tables with Placeholder: run SQL(schemaName, RolesSQL) as the database
// owner after migrating both sets.
//
//go:embed roles.sql
var RolesSQL string
