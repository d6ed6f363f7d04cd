"""Train: pick a task and a model shape, train it live, watch heads form, keep or download the result.

Thin page: the sidebar, the URL's settings, the idea, then ui.train.view's sections in reading
order (training itself runs in ui.train.runs; the numbers come from core.analysis.train).
"""

from __future__ import annotations

from ui.train import view as V
from ui.shell.page import header
from ui.shell.sidebar import shared_sidebar

sel = shared_sidebar()
V.seed_url()  # read the URL first, so any problem with it is reported under the title
header(
    "Train a Transformer",
    "Every model in this app began as random numbers. Training shows it a batch of fresh examples, "
    "measures how unlikely it found the right answers (the loss), and moves every weight a little in "
    "the direction that lowers that number. Do this a few hundred times and the attention heads stop "
    "looking everywhere and start doing a job you can name. Here you choose the task and the shape, "
    "watch the loss fall and the heads sharpen, and keep the result: it joins the sidebar's models for "
    "this session and can be downloaded.",
    r"\begin{gathered}\mathcal{L}(\theta) = -\frac{1}{|S|}\sum_{(b,t)\in S} \log p_\theta\!\left(y_{b,t}\mid x_b\right)"
    r"\\ \theta \leftarrow \theta - \eta_t\,\mathrm{AdamW}\!\left(\nabla_\theta \mathcal{L}\right)\end{gathered}",  # two lines: fits 1024
    lead='Every model here began as random numbers. Choose a task and a shape, press **Train**, and watch the loss fall and the heads sharpen.',
)
V.setup_panel()  # the settings' summary and the buttons read the settings from the session (keyed fragments)
V.train_panel(sel.device)
V.history_panel()
V.keep_panel()
V.upload_panel()
