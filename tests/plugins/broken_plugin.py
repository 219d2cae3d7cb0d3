"""A plugin that raises when imported (a bug of its own, a build for another version): the tests install it as a
package's entry points, backend and probe, to check that every command that does not use it still works."""

raise ImportError("this plugin is broken on purpose (tests/plugins/broken_plugin.py)")
