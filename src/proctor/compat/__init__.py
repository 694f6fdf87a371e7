"""Foreign authoring names mapped onto proctor's: `proctor serve --compat hud FILE`.

`activate("hud", folder)` lets the modules loaded from `folder` (the source file's own
folder: the file and its siblings) import HUD's authoring names (`from hud import
Environment`, `hud.graders`, `hud.capabilities`, ...) as proctor's, without HUD
installed. Nothing else sees them: `sys.modules["hud"]` is never touched, so a real
HUD elsewhere in the process is unaffected, and nothing is active unless asked for.
A HUD name the layer does not map raises `ImportError` naming it.
"""

from ._scope import KINDS, activate

__all__ = ["KINDS", "activate"]
