"""The busy Tk canvas of the computer-use bench, run as a plain script on a desktop.

    python computer_app.py WIDTH HEIGHT READY_FILE

It fills the screen with text and coloured boxes, so PNG frames are of real size, and
draws a red box where each click lands, so no frame equals the last. It writes
READY_FILE once its window is up. `bench/envs/computer_env.py` (proctor) and
`bench/_hud_computer.py` (HUD over VNC) both launch this same file.
"""

import sys
import tkinter as tk
from pathlib import Path

w, h = int(sys.argv[1]), int(sys.argv[2])
root = tk.Tk()
root.geometry(f"{w}x{h}+0+0")
c = tk.Canvas(root, width=w, height=h, background="#f4f4f4", highlightthickness=0)
c.pack()
for i in range(0, h, 18):
    line = f"{i:05d} the quick brown fox jumps over the lazy dog " * 4
    c.create_text(8, i, anchor="nw", text=line)
for i in range(40):
    c.create_rectangle(
        i * 31 % w,
        i * 53 % h,
        i * 31 % w + 120,
        i * 53 % h + 60,
        fill=f"#{i * 6 % 256:02x}{i * 40 % 256:02x}c0",
    )
c.bind("<Button-1>", lambda e: c.create_rectangle(e.x, e.y, e.x + 24, e.y + 16, fill="#d03030"))
root.after(100, lambda: Path(sys.argv[3]).write_text("ready"))
root.mainloop()
