"""How a grade is shown and written: the terminal report and the contract's JSON (report),
the interviewer's scorecard (scorecard), JUnit XML (junit), Gradescope's results (gradescope),
and a grade's page for a browser (grade_page, made with html: the one markup builder and the
page's policy, style and script); `outputs` writes the files a grade was asked for, each apart
from the others; `causes` groups a grade's failures by what explains them, for every format to
say a cause once.

May import: graders.judge (a grade's result), graders.shared. Never a track."""
