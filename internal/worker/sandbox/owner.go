package sandbox

// Owner is the uid and gid a's processes run as, when the worker is root
// and hands them the directories they write in (chown true); without
// root the sandbox maps the worker's own uid, and there is nothing to
// hand over.
func (a *Action) Owner() (uid, gid int, chown bool) {
	return int(a.uid), int(a.s.cfg.GID), a.s.asRoot
}
