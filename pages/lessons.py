"""Lessons: the guided walks through the app, a teacher's own lesson files, and classes that follow a teacher.

Thin page: the sidebar, the idea, then ui.lessons.view's panels in reading order.
"""

from __future__ import annotations

from ui.lessons import view as V
from ui.shell.page import header
from ui.shell.sidebar import shared_sidebar

sel = shared_sidebar()
V.seed_url()
V.join_screen()  # a teacher's open class: code, link and QR code for the projector
header(
    "Lessons",
    "A lesson walks you through the pages in the order of one chapter: each step opens a live view (a page with "
    "its model, input and settings already chosen), says in a few lines what to look at, suggests an experiment "
    "and, at the end of each part, asks a question whose answer is measured on the model itself. Change anything "
    "you like on the way; *reset this step* brings the view back. Teachers can load their own lesson files, "
    "present a lesson full-screen, and open a class that follows their screen.",
    r"\operatorname{Attention}(Q, K, V) = \operatorname{softmax}\!\Big(\frac{QK^\top}{\sqrt{d_k}}\Big)V",
    lead='Guided walks through the pages, one per chapter: each step opens a live view, says what to look at, and asks a question measured on the model itself.',
)
V.lesson_list()
V.teacher_panel()
V.class_panel()
