"""The Tk application of the `form` example: a sign-up form that saves to a JSON file.

`python3 app.py STATE.json` opens the form at the top left of the display. Save writes
`{"saved": true, "name", "email", "subscribe"}` to STATE.json (atomically); the app
writes `{"saved": false}` once its window is drawn, so the task knows it is ready.
"""

import json
import os
import sys
import tkinter as tk

state_path = sys.argv[1]
root = tk.Tk()
root.title("Sign up")
root.geometry("400x260+0+0")
root.configure(background="#ffffff")
font = ("DejaVu Sans", 12)
name, email, subscribe = tk.StringVar(), tk.StringVar(), tk.BooleanVar()
status = tk.StringVar(value="Not saved")


def write(data: dict) -> None:
    with open(state_path + ".tmp", "w") as f:
        json.dump(data, f)
    os.replace(state_path + ".tmp", state_path)


def save() -> None:
    write({"saved": True, "name": name.get(), "email": email.get(), "subscribe": subscribe.get()})
    status.set("Saved")


for y, label, var in ((10, "Name", name), (50, "Email", email)):
    tk.Label(root, text=label, font=font, background="#ffffff").place(x=10, y=y + 4)
    tk.Entry(root, textvariable=var, font=font).place(x=100, y=y, width=280, height=30)
tk.Checkbutton(root, text="Subscribe", variable=subscribe, font=font, background="#ffffff").place(
    x=100, y=90, width=200, height=30
)
tk.Button(root, text="Save", command=save, font=font).place(x=100, y=140, width=120, height=40)
tk.Label(root, textvariable=status, font=font, background="#ffffff").place(x=100, y=200)
root.after(200, lambda: write({"saved": False}))
root.mainloop()
