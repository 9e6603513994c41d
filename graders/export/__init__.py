"""The kata graded past one machine: `kata export`.

    wheel          the kata's wheel, built from a checkout's sources into a folder
    gradescope     the autograder bundle (a zip: setup.sh, run_autograder, the wheel, the
                   assignment's settings and private graders) that Gradescope builds an image from
    autograder     what run_autograder runs in that image for each submission: find the file,
                   grade it, write /autograder/results/results.json
    github_action  a GitHub Actions workflow grading a candidate's repository on push (public
                   cases only)

May import: graders.judge, graders.shared. Never a track.
"""
